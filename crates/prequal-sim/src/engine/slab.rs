//! A slab of values under generation-checked keys.
//!
//! Events name what they concern by key: a query's response or deadline, or a probe's reply or
//! timeout, may come due after it was settled and its slot reused, so a key carries its slot's
//! generation and a stale key finds nothing. A slot and its generation pack into one `u64`.

/// Values in reusable slots; see the module docs.
#[derive(Debug)]
pub(super) struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

fn split(key: u64) -> (usize, u32) {
    ((key & 0xFFFF_FFFF) as usize, (key >> 32) as u32)
}

impl<T> Slab<T> {
    /// Stores `value`; returns its key.
    pub(super) fn insert(&mut self, value: T) -> u64 {
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push((0, None));
            (self.slots.len() - 1) as u32
        });
        let slot = &mut self.slots[index as usize];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(value);
        u64::from(slot.0) << 32 | u64::from(index)
    }

    /// The value under `key`, if it is still there.
    pub(super) fn get(&self, key: u64) -> Option<&T> {
        let (index, generation) = split(key);
        match self.slots.get(index) {
            Some((g, value)) if *g == generation => value.as_ref(),
            _ => None,
        }
    }

    /// The value under `key`, mutably, if it is still there.
    pub(super) fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        let (index, generation) = split(key);
        match self.slots.get_mut(index) {
            Some((g, value)) if *g == generation => value.as_mut(),
            _ => None,
        }
    }

    /// Whether `key` still holds a value.
    pub(super) fn contains(&self, key: u64) -> bool {
        let (index, generation) = split(key);
        self.slots
            .get(index)
            .is_some_and(|(g, value)| *g == generation && value.is_some())
    }

    /// Takes the value under `key` out, freeing its slot.
    pub(super) fn remove(&mut self, key: u64) -> Option<T> {
        let (index, generation) = split(key);
        let (g, value) = self.slots.get_mut(index)?;
        if *g != generation {
            return None;
        }
        let value = value.take()?;
        self.free.push(index as u32);
        Some(value)
    }

    /// True when no slot holds a value.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.slots.iter().all(|(_, value)| value.is_none())
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
