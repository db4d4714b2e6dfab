//! Stopping a statement while it is planned, not only while its operators run.
//!
//! A statement timeout or a CancelRequest is noticed by the task that runs the statement
//! (the PostgreSQL server's `Stop`). DataFusion's operators yield, so dropping the
//! statement's future stops them; planning does not: its analyzer, optimizer and physical
//! optimizer rules are synchronous code. Two pieces make planning stoppable:
//!
//! 1. [`off_task`]: planning runs as a task of its own, so the statement's task stays free
//!    to notice the timeout or the cancel and answer at once; dropping the statement drops
//!    the planning task's handle, which aborts it at its next await.
//! 2. [`Interrupt`]: a per-session flag the statement's task raises when it gives up,
//!    checked by [`InterruptCheck`] before every analyzer, optimizer and physical optimizer
//!    rule ([`interleave`]), so abandoned CPU-bound planning ends at the next rule boundary
//!    instead of running to its end.
//!
//! Invariants:
//!
//! 1. Each session has its own flag ([`Interrupt::fresh`] in `SqlEngine::new_session`);
//!    clones of its options (one per statement's state) share that flag, which is the
//!    point: the flag is a signal to the statement being planned, not a setting.
//! 2. A session clears its flag when a statement starts, so a stop meant for one statement
//!    never fails the next.
//! 3. A check changes no plan: it passes the plan through or fails the statement.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DataFusionError, Result};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::{AnalyzerRule, OptimizerConfig, OptimizerRule};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

/// A session's "stop planning" flag, kept in its DataFusion options (invariant 1).
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// A new flag, not raised.
    pub fn fresh() -> Self {
        Self::default()
    }

    /// Asks the statement being planned to stop at its next rule.
    pub fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Invariant 2: called as a statement starts.
    pub fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    pub fn raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// The flag of a session's options, if it has one.
    pub fn of(options: &ConfigOptions) -> Option<&Interrupt> {
        options.extensions.get::<Interrupt>()
    }

    fn check(options: &ConfigOptions) -> Result<()> {
        match Self::of(options) {
            Some(i) if i.raised() => Err(DataFusionError::Execution(
                "canceling statement: its planning was interrupted (statement timeout or \
                 cancel request)"
                    .into(),
            )),
            _ => Ok(()),
        }
    }
}

impl ConfigExtension for Interrupt {
    const PREFIX: &'static str = "tierdb_interrupt";
}

impl ExtensionOptions for Interrupt {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    /// Shares the flag (invariant 1).
    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, _value: &str) -> Result<()> {
        Err(DataFusionError::Configuration(format!(
            "{}.{key} is not a setting",
            Self::PREFIX
        )))
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        Vec::new()
    }
}

/// The check run before each planning rule (invariant 3).
#[derive(Debug, Default)]
pub struct InterruptCheck;

impl InterruptCheck {
    const NAME: &'static str = "tierdb_interrupt_check";
}

impl AnalyzerRule for InterruptCheck {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        Interrupt::check(config)?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        Self::NAME
    }
}

impl OptimizerRule for InterruptCheck {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        Interrupt::check(&config.options())?;
        Ok(Transformed::no(plan))
    }
}

impl PhysicalOptimizerRule for InterruptCheck {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Interrupt::check(config)?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        Self::NAME
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `rules` with `check` before each of them and after the last.
pub(crate) fn interleave<R: Clone>(rules: Vec<R>, check: R) -> Vec<R> {
    let mut out = Vec::with_capacity(rules.len() * 2 + 1);
    for r in rules {
        out.push(check.clone());
        out.push(r);
    }
    out.push(check);
    out
}

/// Runs planning work as a task of its own (piece 1 of the module's comment); dropping
/// the returned future aborts the task at its next await. A panic in the task is
/// resumed here, as if the work had run inline.
pub(crate) async fn off_task<T, F>(work: F) -> T
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for AbortOnDrop<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut handle = AbortOnDrop(tokio::spawn(work));
    match (&mut handle.0).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only this function aborts the task, and only once it is no longer awaited.
        Err(e) => unreachable!("planning task ended without an answer: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    #[test]
    fn interleave_puts_a_check_around_every_rule() {
        assert_eq!(interleave(vec![1, 2], 0), vec![0, 1, 0, 2, 0]);
        assert_eq!(interleave(Vec::<u8>::new(), 0), vec![0]);
    }

    #[test]
    fn clones_of_a_sessions_options_share_its_flag_and_a_fresh_one_does_not() {
        let mut options = ConfigOptions::default();
        options.extensions.insert(Interrupt::fresh());
        let copy = options.clone();
        Interrupt::of(&options).expect("inserted").raise();
        assert!(Interrupt::of(&copy).expect("cloned").raised());
        let mut other = copy.clone();
        other.extensions.insert(Interrupt::fresh());
        assert!(!Interrupt::of(&other).expect("fresh").raised());
        assert!(Interrupt::check(&other).is_ok());
        assert!(Interrupt::check(&copy).is_err());
        assert!(other.set("tierdb_interrupt.x", "1").is_err());
    }

    #[tokio::test]
    async fn a_raised_flag_fails_planning_at_the_next_rule() {
        let interrupt = Interrupt::fresh();
        let mut config = datafusion::prelude::SessionConfig::new();
        config.options_mut().extensions.insert(interrupt.clone());
        let state = datafusion::execution::SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_optimizer_rules(interleave(
                datafusion::optimizer::Optimizer::new().rules,
                Arc::new(InterruptCheck) as _,
            ))
            .build();
        let ctx = SessionContext::new_with_state(state);
        let df = ctx.sql("SELECT 1 + 1").await.expect("planned");
        assert_eq!(df.clone().collect().await.expect("runs").len(), 1);
        interrupt.raise();
        let e = df.collect().await.expect_err("interrupted");
        assert!(e.to_string().contains("interrupted"), "{e}");
    }

    /// The statement's task answers while the planning task still blocks its thread:
    /// the planning here waits for a message the test sends only after the timeout has
    /// been answered, so the test hangs (and fails by its own limit) if it could not be.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timeout_is_answered_while_planning_blocks_its_thread() {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let planning = off_task(async move {
            let _ = started_tx.send(());
            // Synchronous work that never yields, as an optimizer rule is.
            let _ = wait.recv();
            7
        });
        let answered = async {
            tokio::select! {
                v = planning => Some(v),
                _ = async { let _ = started.await; } => None,
            }
        };
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(120), answered)
            .await
            .expect("the statement's task answered while planning blocked");
        assert_eq!(outcome, None, "the stop won, not the blocked planning");
        release.send(()).expect("planning still waits");
    }
}
