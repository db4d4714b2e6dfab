//! The process memory budget (`--memory-limit`) of the SQL commands, split among what holds
//! memory in a tierdb process:
//!
//! | part | what | default |
//! |---|---|---|
//! | DRAM tier | cached blocks of the database's objects | a third of the budget, at most a quarter of the machine |
//! | metadata cache | parsed Parquet footers and page indexes | 256 MiB, at most 1/16 of the budget |
//! | reserve | everything not counted: the KV engine's memtables, connections, rows in flight to clients, the code | 1/8 of the budget, 64 MiB to 1 GiB |
//! | query memory | DataFusion's pool: sorts, joins, aggregations, repartitions; past it an operator spills or the statement fails with 53200 | what the others leave |
//!
//! The budget defaults to three quarters of the machine (the rest is the OS's, the page
//! cache's and the device tier's). A part given on the command line is kept; the parts
//! given must fit in the budget with the reserve, or the command refuses to start.

use bytesize::ByteSize;

/// The reserve's bounds.
const RESERVE_MIN: u64 = 64 << 20;
const RESERVE_MAX: u64 = 1 << 30;
/// The least query memory that is worth starting with.
const QUERY_MIN: u64 = 64 << 20;

/// How a budget is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    pub limit: u64,
    pub tier: u64,
    pub metadata: u64,
    pub reserve: u64,
    pub query: u64,
}

/// What was given on the command line (`None`: not given).
#[derive(Debug, Clone, Copy, Default)]
pub struct Given {
    pub limit: Option<u64>,
    pub tier: Option<u64>,
    pub metadata: Option<u64>,
    pub query: Option<u64>,
}

impl MemoryPlan {
    /// Splits the budget on a machine of `physical` bytes (0: unknown, then 4 GiB is
    /// assumed). `Err`: what does not fit, and how to fix it.
    pub fn new(given: Given, physical: u64) -> Result<MemoryPlan, String> {
        let physical = if physical == 0 { 4 << 30 } else { physical };
        let limit = given.limit.unwrap_or(physical / 4 * 3);
        let reserve = (limit / 8).clamp(RESERVE_MIN, RESERVE_MAX);
        let metadata = given.metadata.unwrap_or((limit / 16).min(256 << 20));
        let tier = given.tier.unwrap_or((limit / 3).min(physical / 4));
        let fixed = tier + metadata + reserve;
        let query = match given.query {
            Some(q) => q,
            None => limit.saturating_sub(fixed),
        };
        let b = |n: u64| ByteSize(n).to_string();
        // Query memory given explicitly may be as small as the user wants (it is where a
        // statement spills or fails); what is left over must be worth starting with.
        if given.query.is_none() && query < QUERY_MIN {
            return Err(format!(
                "--memory-limit {} leaves {} of query memory (at least {} is needed) after \
                 the DRAM tier ({}, --memory-bytes), the metadata cache ({}, \
                 --metadata-cache) and {} for the rest of the process: raise --memory-limit \
                 or give the DRAM tier less",
                b(limit),
                b(query),
                b(QUERY_MIN),
                b(tier),
                b(metadata),
                b(reserve)
            ));
        }
        if fixed + query > limit {
            return Err(format!(
                "--memory-limit {} does not hold the DRAM tier ({}, --memory-bytes), the \
                 metadata cache ({}, --metadata-cache), {} of query memory (--memory) and {} \
                 for the rest of the process: raise --memory-limit or give the parts less",
                b(limit),
                b(tier),
                b(metadata),
                b(query),
                b(reserve)
            ));
        }
        Ok(MemoryPlan {
            limit,
            tier,
            metadata,
            reserve,
            query,
        })
    }

    /// One line for the log and the start-up message.
    pub fn describe(&self) -> String {
        let b = |n: u64| ByteSize(n).to_string();
        format!(
            "memory budget {}: DRAM tier {}, query memory {}, metadata cache {}, reserve {}",
            b(self.limit),
            b(self.tier),
            b(self.query),
            b(self.metadata),
            b(self.reserve)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn the_defaults_fill_three_quarters_of_the_machine() {
        let p = MemoryPlan::new(Given::default(), 24 * GIB).unwrap();
        assert_eq!(p.limit, 18 * GIB);
        assert_eq!(p.tier, 6 * GIB, "a quarter of the machine, as before");
        assert_eq!(p.metadata, 256 * MIB);
        assert_eq!(p.reserve, GIB);
        assert_eq!(p.tier + p.metadata + p.reserve + p.query, p.limit);
    }

    #[test]
    fn a_small_budget_is_split_in_proportion() {
        let given = Given {
            limit: Some(512 * MIB),
            ..Given::default()
        };
        let p = MemoryPlan::new(given, 24 * GIB).unwrap();
        assert_eq!(p.reserve, 64 * MIB);
        assert_eq!(p.metadata, 32 * MIB);
        assert_eq!(p.tier, 512 * MIB / 3);
        assert_eq!(p.tier + p.metadata + p.reserve + p.query, p.limit);
    }

    #[test]
    fn parts_given_are_kept_and_must_fit() {
        let given = Given {
            limit: Some(4 * GIB),
            tier: Some(GIB),
            query: Some(2 * GIB),
            metadata: None,
        };
        let p = MemoryPlan::new(given, 24 * GIB).unwrap();
        assert_eq!((p.tier, p.query), (GIB, 2 * GIB));
        let too_much = Given {
            tier: Some(3 * GIB),
            ..given
        };
        let e = MemoryPlan::new(too_much, 24 * GIB).unwrap_err();
        assert!(e.contains("--memory-limit 4.0 GiB does not hold"), "{e}");
        assert!(e.contains("raise --memory-limit"), "{e}");
        // Nothing left for queries.
        let tiny = Given {
            limit: Some(128 * MIB),
            ..Given::default()
        };
        let e = MemoryPlan::new(tiny, 24 * GIB).unwrap_err();
        assert!(
            e.contains("of query memory (at least 64.0 MiB is needed)"),
            "{e}"
        );
        // A small query memory given on purpose is kept (a statement spills or fails).
        let small = Given {
            query: Some(4 * MIB),
            ..Given::default()
        };
        assert_eq!(MemoryPlan::new(small, 24 * GIB).unwrap().query, 4 * MIB);
    }
}
