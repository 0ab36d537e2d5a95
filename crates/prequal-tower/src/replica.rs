//! Replica ids for discovery keys.
//!
//! The core names replicas by [`ReplicaId`], which it assumes is never reused for a different
//! replica; discovery names them by its own keys, which it may reuse once removed, and may
//! insert again under a key still in use (a replacement). So each insert gets a fresh id, and
//! a replacement is the old id's removal followed by the new id's insertion.

use std::collections::HashMap;
use std::hash::Hash;

use prequal_core::ReplicaId;

/// The ids of the replicas discovery has inserted and not removed.
#[derive(Debug)]
pub(crate) struct ReplicaKeys<K> {
    ids: HashMap<K, ReplicaId>,
    next: u32,
}

impl<K: Hash + Eq> ReplicaKeys<K> {
    pub(crate) fn new() -> Self {
        Self {
            ids: HashMap::new(),
            next: 0,
        }
    }

    /// A fresh id for `key`, and the id it replaces if the key was in use.
    pub(crate) fn insert(&mut self, key: K) -> (ReplicaId, Option<ReplicaId>) {
        let id = ReplicaId(self.next);
        // Four billion inserts in one balancer's life would wrap; ids of replicas long gone
        // would then be reused, which the core tolerates (it forgets removed ids).
        self.next = self.next.wrapping_add(1);
        (id, self.ids.insert(key, id))
    }

    /// The id `key` had, now forgotten.
    pub(crate) fn remove(&mut self, key: &K) -> Option<ReplicaId> {
        self.ids.remove(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_for_a_key_inserted_again() {
        let mut keys = ReplicaKeys::new();
        assert_eq!(keys.insert("a"), (ReplicaId(0), None));
        assert_eq!(keys.insert("b"), (ReplicaId(1), None));
        assert_eq!(keys.insert("a"), (ReplicaId(2), Some(ReplicaId(0))));
        assert_eq!(keys.remove(&"a"), Some(ReplicaId(2)));
        assert_eq!(keys.remove(&"a"), None);
        assert_eq!(keys.insert("a"), (ReplicaId(3), None));
    }
}
