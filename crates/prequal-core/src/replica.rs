//! The replica set: stable ids, per-replica state, and insert/remove changes as discovery
//! delivers them.
//!
//! Every policy keeps some state per replica (client-local RIF, an EWMA, a weight). [`Replicas`]
//! holds that state in a vector kept sorted by [`ReplicaId`], so iteration order, and with it
//! every decision, is the same on every run. Lookups are binary searches; inserts and removals
//! shift the vector, which is fine because membership changes are rare next to picks.

use std::fmt;

/// A replica's stable identity. Drivers assign ids (the simulator uses server indices, the proxy
/// assigns one per upstream address) and never reuse an id for a different replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct ReplicaId(pub u32);

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// A change to the replica set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaChange {
    /// A replica joined (or came back).
    Insert(ReplicaId),
    /// A replica left.
    Remove(ReplicaId),
}

/// Per-replica state `T`, ordered by [`ReplicaId`].
#[derive(Clone, Debug)]
pub struct Replicas<T> {
    ids: Vec<ReplicaId>,
    states: Vec<T>,
}

impl<T> Default for Replicas<T> {
    fn default() -> Self {
        Self {
            ids: Vec::new(),
            states: Vec::new(),
        }
    }
}

impl<T> Replicas<T> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when there are no replicas.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The replica ids, in ascending order.
    pub fn ids(&self) -> &[ReplicaId] {
        &self.ids
    }

    /// The position of `id` in the ordered set, if present.
    pub fn index_of(&self, id: ReplicaId) -> Option<usize> {
        // Ids are sorted and distinct, so an id found at its own number is at that position:
        // the common case of replicas numbered from zero, answered without a search.
        let at = id.0 as usize;
        if self.ids.get(at) == Some(&id) {
            return Some(at);
        }
        self.ids.binary_search(&id).ok()
    }

    /// True when `id` is in the set.
    pub fn contains(&self, id: ReplicaId) -> bool {
        self.index_of(id).is_some()
    }

    /// The id at position `index`.
    pub fn id_at(&self, index: usize) -> ReplicaId {
        self.ids[index]
    }

    /// The state of `id`, if present.
    pub fn get(&self, id: ReplicaId) -> Option<&T> {
        self.index_of(id).map(|i| &self.states[i])
    }

    /// The state of `id`, if present, looked for first at position `hint` (where it was when
    /// last looked up, as a pool entry remembers its replica's slot): no search while the set
    /// is unchanged.
    #[inline]
    pub fn get_hinted(&self, id: ReplicaId, hint: usize) -> Option<&T> {
        if self.ids.get(hint) == Some(&id) {
            Some(&self.states[hint])
        } else {
            self.get(id)
        }
    }

    /// The state of `id`, mutably, if present.
    pub fn get_mut(&mut self, id: ReplicaId) -> Option<&mut T> {
        self.index_of(id).map(|i| &mut self.states[i])
    }

    /// The state at position `index`.
    pub fn at(&self, index: usize) -> &T {
        &self.states[index]
    }

    /// The state at position `index`, mutably.
    pub fn at_mut(&mut self, index: usize) -> &mut T {
        &mut self.states[index]
    }

    /// Inserts `id` with `state`. Returns false (and keeps the old state) if it was present.
    pub fn insert(&mut self, id: ReplicaId, state: T) -> bool {
        match self.ids.binary_search(&id) {
            Ok(_) => false,
            Err(pos) => {
                self.ids.insert(pos, id);
                self.states.insert(pos, state);
                true
            }
        }
    }

    /// Removes `id`, returning its state if it was present.
    pub fn remove(&mut self, id: ReplicaId) -> Option<T> {
        let pos = self.ids.binary_search(&id).ok()?;
        self.ids.remove(pos);
        Some(self.states.remove(pos))
    }

    /// Applies a discovery change, building new state with `make` for inserts.
    /// Returns true when the set changed.
    pub fn apply(&mut self, change: ReplicaChange, make: impl FnOnce() -> T) -> bool {
        match change {
            ReplicaChange::Insert(id) => self.insert(id, make()),
            ReplicaChange::Remove(id) => self.remove(id).is_some(),
        }
    }

    /// Iterates over `(id, state)` in id order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (ReplicaId, &T)> {
        self.ids.iter().copied().zip(self.states.iter())
    }

    /// Iterates over `(id, state)` in id order, mutably.
    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = (ReplicaId, &mut T)> {
        self.ids.iter().copied().zip(self.states.iter_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_id_order_through_changes() {
        let mut set = Replicas::new();
        assert!(set.apply(ReplicaChange::Insert(ReplicaId(5)), || 'a'));
        assert!(set.apply(ReplicaChange::Insert(ReplicaId(1)), || 'b'));
        assert!(set.apply(ReplicaChange::Insert(ReplicaId(3)), || 'c'));
        assert!(!set.apply(ReplicaChange::Insert(ReplicaId(3)), || 'z'));
        assert_eq!(set.ids(), &[ReplicaId(1), ReplicaId(3), ReplicaId(5)]);
        assert_eq!(set.get(ReplicaId(3)), Some(&'c'));
        assert!(set.apply(ReplicaChange::Remove(ReplicaId(1)), || 'x'));
        assert!(!set.apply(ReplicaChange::Remove(ReplicaId(1)), || 'x'));
        assert_eq!(set.ids(), &[ReplicaId(3), ReplicaId(5)]);
        assert_eq!(set.index_of(ReplicaId(5)), Some(1));
        assert_eq!(set.iter().map(|(_, s)| *s).collect::<String>(), "ca");
    }
}
