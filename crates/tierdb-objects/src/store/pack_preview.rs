//! `tierdb zodb pack --dry-run`: what a pack would remove, without writing anything.
//!
//! Runs pack's mark pass and its per-object rule ([`super::pack::removed`]) over the
//! revisions a page at a time, and for each object that would go entirely reads the class
//! and size of its last revision with data. Writes nothing, so it runs on a follower
//! beside a live writer; what it reports is what a pack started now would remove, give or
//! take the commits in between.

use std::collections::BTreeMap;

use roaring::RoaringTreemap;

use super::iter::RevisionGroups;
use super::pack::removed;
use super::*;

/// What a pack would remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackPreview {
    /// Objects reachable from the root (with garbage collection).
    pub objects_reachable: Option<u64>,
    pub revisions_removed: u64,
    pub objects_removed: u64,
    /// The objects that would go, by class (`?` when the class cannot be read): how many,
    /// and the bytes of their last pickles.
    pub removed_by_class: BTreeMap<String, ClassTotal>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassTotal {
    pub objects: u64,
    pub bytes: u64,
}

impl VersionedStore {
    /// What [`Self::pack_with`] with the same arguments would remove now.
    pub async fn pack_preview(
        &self,
        pack_tid: Tid,
        refs: Option<&References>,
        progress: &dyn Progress,
    ) -> Result<PackPreview> {
        let mut out = PackPreview::default();
        let reachable = match refs {
            Some(refs) => {
                let r = self.mark(pack_tid, refs, progress).await?;
                out.objects_reachable = Some(r.len());
                Some(r)
            }
            None => None,
        };
        progress.pass("sweep (dry run)");
        let mut groups = RevisionGroups::new();
        while let Some((oid, revs)) = groups.next(&self.kv).await? {
            progress.advance(revs.len() as u64);
            self.preview_object(oid, &revs, pack_tid, reachable.as_ref(), &mut out)
                .await?;
        }
        Ok(out)
    }

    async fn preview_object(
        &self,
        oid: Oid,
        revs: &[(Tid, Revision)],
        pack_tid: Tid,
        reachable: Option<&RoaringTreemap>,
        out: &mut PackPreview,
    ) -> Result<()> {
        let garbage = reachable.is_some_and(|r| !r.contains(oid.0));
        let gone = removed(revs, pack_tid, garbage)
            .into_iter()
            .filter(|r| *r)
            .count();
        out.revisions_removed += gone as u64;
        if gone < revs.len() {
            return Ok(());
        }
        out.objects_removed += 1;
        let (class, bytes) = match revs.iter().rev().find_map(|(_, r)| r.data) {
            Some(h) => {
                let data = self.read_data(&h).await?;
                (crate::unpickle::record_class(&data), data.len() as u64)
            }
            None => (None, 0),
        };
        let t = out
            .removed_by_class
            .entry(class.unwrap_or_else(|| "?".into()))
            .or_default();
        t.objects += 1;
        t.bytes += bytes;
        Ok(())
    }
}
