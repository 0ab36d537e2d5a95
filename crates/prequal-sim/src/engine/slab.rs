//! Values under generation-checked keys, for events that name what they concern.
//!
//! A query's response or deadline, or a probe's reply or timeout, may come due after it was
//! settled and its slot reused, so a key carries its slot's version and a stale key finds
//! nothing. The storage is [`slotmap::SlotMap`]; this wrapper only turns its keys into the
//! `u64` the event queue carries.

use slotmap::{DefaultKey, Key, KeyData, SlotMap};

/// Values in reusable slots; see the module docs.
#[derive(Debug)]
pub(super) struct Slab<T> {
    map: SlotMap<DefaultKey, T>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            map: SlotMap::new(),
        }
    }
}

fn key(raw: u64) -> DefaultKey {
    KeyData::from_ffi(raw).into()
}

impl<T> Slab<T> {
    /// Stores `value`; returns its key.
    pub(super) fn insert(&mut self, value: T) -> u64 {
        self.map.insert(value).data().as_ffi()
    }

    /// The value under `key`, if it is still there.
    pub(super) fn get(&self, raw: u64) -> Option<&T> {
        self.map.get(key(raw))
    }

    /// The value under `key`, mutably, if it is still there.
    pub(super) fn get_mut(&mut self, raw: u64) -> Option<&mut T> {
        self.map.get_mut(key(raw))
    }

    /// Whether `key` still holds a value.
    pub(super) fn contains(&self, raw: u64) -> bool {
        self.map.contains_key(key(raw))
    }

    /// Takes the value under `key` out, freeing its slot.
    pub(super) fn remove(&mut self, raw: u64) -> Option<T> {
        self.map.remove(key(raw))
    }

    /// True when no slot holds a value.
    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_find_nothing_after_reuse() {
        let mut slab = Slab::default();
        let a = slab.insert('a');
        assert!(slab.contains(a));
        assert_eq!(slab.remove(a), Some('a'));
        assert!(!slab.contains(a));
        let b = slab.insert('b');
        assert_ne!(a, b, "the slot is reused under a new generation");
        assert_eq!(slab.get_mut(a), None);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get_mut(b).copied(), Some('b'));
        assert_eq!(slab.remove(b), Some('b'));
        assert_eq!(slab.remove(b), None);
    }
}
