//! The probe pool: a small, bounded set of recent probe replies, oldest first.
//!
//! Each [`Entry`] records who replied, when the reply was received (the receipt time, not the
//! send time, so no clock skew enters), the reported RIF and latency, and how often this client
//! has used the reply. The pool enforces three of Prequal's four removal reasons by itself:
//! capacity (a new reply evicts the oldest once `m` are held), age (replies older than the age
//! limit are dropped by [`Pool::expire`]), and the reuse budget (a reply is dropped when used
//! `budget` times). The fourth, removal of the oldest or worst per query, is the engine's job
//! because "worst" depends on the selection rule.
//!
//! The pool holds at most one reply per replica: a newer reply from a replica supersedes the
//! older one (the paper leaves this open; with n ≫ m duplicates are rare anyway). Without it,
//! when there are about as many replicas as pool slots or fewer, one replica could hold several
//! entries and using one of them would raise only that entry's RIF, so the others would keep
//! advertising the old, low RIF and draw a burst of queries to the same replica.

use std::time::Duration;

use crate::policy::LoadReport;
use crate::replica::ReplicaId;
use crate::time::{Time, duration_nanos, scale_with_rif};

/// One probe reply held in the pool.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The replica that replied.
    pub replica: ReplicaId,
    /// When the reply was received.
    pub received: Time,
    /// The reported RIF, plus one for every time this client has used the reply since (less
    /// one for each of this client's queries counted in it that finished, with
    /// `completions_lower_rif`); with `own_rif_live`, the other clients' share ([`Entry::others`])
    /// plus this client's queries in flight at the replica, kept so at every dispatch and
    /// completion there (between a pick and its dispatch it counts the pick's use as well).
    pub rif: u32,
    /// The reported latency estimate.
    pub latency: Duration,
    /// The same in whole nanoseconds, converted once on arrival rather than whenever the reply
    /// is ranked.
    pub(crate) latency_ns: u64,
    /// Times this client has used the reply.
    pub uses: u32,
    /// How many of the queries sent on the reply have finished (at most `uses`; see
    /// [`Pool::on_finished`]).
    pub settled: u32,
    /// Uses allowed before the reply is removed (b_reuse, rounded for this reply; at least 1).
    pub budget: u32,
    /// The other clients' share of the reported RIF: the RIF less this client's queries in
    /// flight at the replica when the reply came, set by [`Entry::with_own`] (without a count, the
    /// whole reported RIF).
    pub others: u32,
    /// The replica's position in the policy's replica set, so ranking reads its state without
    /// a search. A hint: the policy refreshes it on membership changes and checks it on use.
    pub(crate) slot: usize,
}

impl Entry {
    /// A reply from `replica` received at `received`, not used yet, with `budget` uses (the
    /// pool raises a zero budget to one) and the replica's position `slot` in the policy's set.
    pub(crate) fn new(
        replica: ReplicaId,
        received: Time,
        report: &LoadReport,
        budget: u32,
        slot: usize,
    ) -> Self {
        Entry {
            replica,
            received,
            rif: report.rif,
            latency: report.latency,
            latency_ns: duration_nanos(report.latency),
            uses: 0,
            settled: 0,
            budget,
            others: report.rif,
            slot,
        }
    }

    /// The same reply, its RIF split into the other clients' share and this client's `own`
    /// queries in flight at the replica when it came, if given (`own_rif_live`): the others'
    /// share is the rest, at least 0. Some of this client's queries may not have reached the
    /// replica when it answered, so the share errs low by the queries on the way; the
    /// replica's load is never taken below this client's own.
    pub fn with_own(mut self, own: Option<u32>) -> Self {
        if let Some(own) = own {
            self.others = self.rif.saturating_sub(own);
            self.set_own(own);
        }
        self
    }

    /// This client now has `own` queries in flight at the replica: the reply's RIF is the
    /// other clients' share plus them.
    fn set_own(&mut self, own: u32) {
        self.rif = self.others.saturating_add(own);
    }

    /// A query of this client sent at `dispatched` has finished ([`Pool::on_finished`]). With
    /// `at_receipt_since`, one sent at the very instant the reply came (a query that waited for
    /// it) counts as sent since: it cannot be in the reported RIF, and it is nearly always a use
    /// of the reply (when several replies come at one instant, as they can in a simulation, a
    /// query sent then on the replica's previous reply is taken for one too). Without, it
    /// counts as sent before, which is how [`Pool::on_finished`] has always settled, so that
    /// figures measured with `own_rif_live = false` reproduce.
    fn settle(&mut self, dispatched: Time, at_receipt_since: bool) {
        let since = dispatched > self.received || (at_receipt_since && dispatched == self.received);
        if since {
            if self.settled >= self.uses {
                return;
            }
            self.settled += 1;
        }
        self.rif = self.rif.saturating_sub(1);
    }

    /// The reply's age at `now`.
    pub fn age(&self, now: Time) -> Duration {
        now.saturating_since(self.received)
    }

    /// Uses left before the reply is removed.
    pub fn uses_left(&self) -> u32 {
        self.budget.saturating_sub(self.uses)
    }

    /// The reported latency grown with the queries this client has sent on the reply that have
    /// not finished (`own`, which is `uses − settled`): × (RIF + 1) / (RIF − own + 1), the RIF
    /// being this entry's (the report's, kept up to date with this client's queries). That is
    /// the replica's load with this client's additions over its load without them, as Traefik's
    /// `leasttime` scores a backend by its response time × (active connections + 1). It is not
    /// the latency at the current RIF over that at the reported one: a query that was already
    /// in flight when the reply came lowers the RIF when it finishes but not `own`, so the
    /// additions then weigh more, not less. With `completions_lower_rif = false` nothing is
    /// settled, so every use counts until the reply leaves the pool.
    pub fn latency_with_own_queries_ns(&self) -> u64 {
        let own = self.uses.saturating_sub(self.settled);
        if own == 0 {
            return self.latency_ns;
        }
        scale_with_rif(self.latency_ns, self.rif.saturating_sub(own), self.rif)
    }
}

/// Replica ids below this are tracked in [`Pool`]'s bitset; larger ones are searched for.
const HELD_IDS: u32 = 1 << 16;

/// A bounded pool of probe replies, ordered by receipt time (front = oldest).
#[derive(Clone, Debug)]
pub struct Pool {
    /// The replies, oldest first, from `head` on. A vector, not a ring: every decision walks
    /// the whole pool more than once, and a walk over one slice is tighter than one over a
    /// ring's two halves. A reply is taken out by moving the shorter side: the oldest, the one
    /// most often taken out, leaves by moving `head` up rather than the rest down. The slots
    /// before `head` are dead, and reclaimed when the vector is full (see `Pool::make_room`).
    entries: Vec<Entry>,
    /// Where the live replies begin in `entries`.
    head: usize,
    /// Bit `id` is set while the pool holds a reply from replica `id` (for ids below
    /// [`HELD_IDS`]), so most inserts, which are from replicas not held, skip the search for
    /// an older reply to supersede.
    held: Vec<u64>,
    capacity: usize,
    max_age: Duration,
}

impl Pool {
    /// An empty pool holding at most `capacity` replies (at least one), each for at most
    /// `max_age`.
    pub fn new(capacity: usize, max_age: Duration) -> Self {
        let capacity = capacity.max(1);
        Self {
            // Room for a typical pool up front, twice over so the dead slots left by the oldest
            // replies are reclaimed only every pool's worth of them; a larger pool's vector
            // grows as replies come, to at least twice its capacity (`Pool::make_room`).
            entries: Vec::with_capacity(2 * capacity.min(64)),
            head: 0,
            held: Vec::new(),
            capacity,
            max_age,
        }
    }

    /// Number of replies held.
    pub fn len(&self) -> usize {
        self.entries.len() - self.head
    }

    /// True when no reply is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The replies held, oldest first.
    fn live(&self) -> &[Entry] {
        &self.entries[self.head..]
    }

    /// The replies held, oldest first, mutably.
    fn live_mut(&mut self) -> &mut [Entry] {
        &mut self.entries[self.head..]
    }

    /// Reclaims the dead slots before `head` (the live replies move to the front).
    fn compact(&mut self) {
        self.entries.drain(..self.head);
        self.head = 0;
    }

    /// Makes room for one more reply: when the vector is full and has room for twice the
    /// pool's capacity, the dead slots are reclaimed; a smaller vector grows instead. So the
    /// vector stays under four times the pool's capacity, and the live replies move once for
    /// every pool's worth of oldest replies taken out, whatever the capacity (a vector only
    /// as large as the pool would move them all for every reply).
    fn make_room(&mut self) {
        if self.head > 0
            && self.entries.len() == self.entries.capacity()
            && self.entries.capacity() >= 2 * self.capacity
        {
            self.compact();
        }
    }

    /// The most replies the pool holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records whether a reply from `replica` is held.
    fn mark(&mut self, replica: ReplicaId, held: bool) {
        if replica.0 >= HELD_IDS {
            return;
        }
        let (word, bit) = ((replica.0 / 64) as usize, replica.0 % 64);
        if word >= self.held.len() {
            if !held {
                return;
            }
            self.held.resize(word + 1, 0);
        }
        if held {
            self.held[word] |= 1 << bit;
        } else {
            self.held[word] &= !(1 << bit);
        }
    }

    /// The position of the reply from `replica`, if one is held.
    fn position(&self, replica: ReplicaId) -> Option<usize> {
        if replica.0 < HELD_IDS {
            let word = self
                .held
                .get((replica.0 / 64) as usize)
                .copied()
                .unwrap_or(0);
            if word & 1 << (replica.0 % 64) == 0 {
                return None;
            }
        }
        self.live().iter().position(|e| e.replica == replica)
    }

    /// A load report from `replica`, received at `now` unasked (piggybacked on a response),
    /// takes the place of the reply held from it, if one is and it is not newer: the report's
    /// RIF and latency, received now, no uses yet, and the held reply's budget again. A replica
    /// whose reply is not held is left out (such reports come only from replicas this client
    /// chose, not from a random sample). The report counts the replica's load without the query
    /// that carried it, which has finished by now, so every query of this client still out to
    /// the replica was in flight when it was made: [`Pool::on_finished`] takes each off as
    /// it ends. Returns whether a reply was refreshed.
    /// With `own` ([`Entry::with_own`]) the new reply's RIF is split at once.
    pub fn refresh(
        &mut self,
        replica: ReplicaId,
        report: &LoadReport,
        now: Time,
        own: Option<u32>,
    ) -> bool {
        let Some(index) = self.position(replica) else {
            return false;
        };
        let held = &self.live()[index];
        if held.received > now {
            return false;
        }
        let (budget, slot) = (held.budget, held.slot);
        self.insert(Entry::new(replica, now, report, budget, slot).with_own(own));
        true
    }

    /// Takes the reply at `index` out of the list (its `held` bit is the caller's).
    fn remove_at(&mut self, index: usize) -> Option<Entry> {
        let len = self.len();
        if index >= len {
            return None;
        }
        let entry = if index >= len / 2 {
            // Nearer the newest (or the only one): the newer replies move down a slot.
            self.entries.remove(self.head + index)
        } else {
            // Nearer the oldest: the older replies move up a slot, and the reply, now first,
            // leaves as the oldest does, its slot left dead.
            self.live_mut()[..=index].rotate_right(1);
            self.head += 1;
            self.entries[self.head - 1].clone()
        };
        if self.is_empty() {
            // Nothing is live: every slot can be reused at no cost.
            self.entries.clear();
            self.head = 0;
        }
        Some(entry)
    }

    /// Removes the oldest reply.
    fn pop_oldest(&mut self) -> Option<Entry> {
        let entry = self.remove_at(0)?;
        self.mark(entry.replica, false);
        Some(entry)
    }

    /// The replies, oldest first.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Entry> + DoubleEndedIterator {
        self.live().iter()
    }

    /// Changes the capacity (at least one); when it shrinks, the oldest replies leave first.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
        while self.len() > self.capacity {
            self.pop_oldest();
        }
    }

    /// A query this client sent to `replica` at `dispatched` has finished: the replica's reply,
    /// if one is held, loses the one RIF that query added to it. A query sent before the reply
    /// arrived was in flight when the replica answered, so it is in the reported RIF; one sent
    /// since went on the reply and its use added one. A query sent since that did not go on the
    /// reply (a random fallback, or a replica the balancer chose instead) was never counted: it
    /// changes nothing once every use has settled, but while one is out the pool cannot tell
    /// the two apart, and it settles that use. Never below zero.
    pub fn on_finished(&mut self, replica: ReplicaId, dispatched: Time) {
        if let Some(index) = self.position(replica) {
            self.live_mut()[index].settle(dispatched, false);
        }
    }

    /// This client now has `own` queries in flight at `replica`: its reply's RIF, if one is
    /// held, is the other clients' share ([`Entry::with_own`]) plus them.
    pub fn set_own(&mut self, replica: ReplicaId, own: u32) {
        if let Some(index) = self.position(replica) {
            self.live_mut()[index].set_own(own);
        }
    }

    /// A query of this client to `replica` has finished and `own` of its queries are still in
    /// flight there: [`Pool::on_finished`] if `dispatched` is given (except that a query sent
    /// at the instant the reply came settles as one sent since), then [`Pool::set_own`], with
    /// one search for the reply.
    pub fn on_finished_with_own(&mut self, replica: ReplicaId, dispatched: Option<Time>, own: u32) {
        if let Some(index) = self.position(replica) {
            let entry = &mut self.live_mut()[index];
            if let Some(dispatched) = dispatched {
                entry.settle(dispatched, true);
            }
            entry.set_own(own);
        }
    }

    /// The reply at `index` (0 = oldest).
    pub fn get(&self, index: usize) -> Option<&Entry> {
        self.live().get(index)
    }

    /// Adds a reply, superseding an older reply from the same replica, else evicting the
    /// oldest when full. A reply older than the one held for its replica is ignored. A zero
    /// budget is raised to one, since a reply that can never be used would only take a slot.
    /// Returns the reply that left the pool to make room, if any.
    pub fn insert(&mut self, mut entry: Entry) -> Option<Entry> {
        entry.budget = entry.budget.max(1);
        let held = self.position(entry.replica);
        if let Some(index) = held
            && self.live()[index].received > entry.received
        {
            return None;
        }
        let evicted = if let Some(index) = held {
            self.remove_at(index)
        } else if self.len() >= self.capacity {
            self.pop_oldest()
        } else {
            None
        };
        self.mark(entry.replica, true);
        self.make_room();
        // Drivers hand in non-decreasing times, so this is the back; the search only guards
        // the order (and with it `expire`) against one that does not.
        if self
            .live()
            .last()
            .is_none_or(|e| e.received <= entry.received)
        {
            self.entries.push(entry);
        } else {
            let at = self
                .live()
                .partition_point(|e| e.received <= entry.received);
            self.entries.insert(self.head + at, entry);
        }
        evicted
    }

    /// Drops every reply older than the age limit at `now`; returns how many were dropped.
    /// Replies are kept in receipt order, so the expired ones are at the front.
    pub fn expire(&mut self, now: Time) -> usize {
        let mut dropped = 0;
        while self
            .live()
            .first()
            .is_some_and(|e| e.age(now) > self.max_age)
        {
            self.pop_oldest();
            dropped += 1;
        }
        dropped
    }

    /// Drops every reply from `replica` (it left the replica set).
    pub fn remove_replica(&mut self, replica: ReplicaId) {
        self.compact();
        self.entries.retain(|e| e.replica != replica);
        self.mark(replica, false);
    }

    /// Refreshes every reply's replica-set position after a membership change.
    pub(crate) fn reslot(&mut self, slot_of: impl Fn(ReplicaId) -> Option<usize>) {
        for entry in self.live_mut() {
            entry.slot = slot_of(entry.replica).unwrap_or(usize::MAX);
        }
    }

    /// Removes and returns the reply at `index`.
    pub fn remove(&mut self, index: usize) -> Option<Entry> {
        let entry = self.remove_at(index)?;
        self.mark(entry.replica, false);
        Some(entry)
    }

    /// Takes back one use of the reply from `replica` received at `received`, if it is still
    /// held: a query picked on it went elsewhere. Its RIF and its uses go down by one (never
    /// below zero, nor below the uses settled).
    pub fn unuse(&mut self, replica: ReplicaId, received: Time) {
        let Some(index) = self.position(replica) else {
            return;
        };
        let entry = &mut self.live_mut()[index];
        if entry.received != received || entry.uses == 0 {
            return;
        }
        entry.uses -= 1;
        entry.settled = entry.settled.min(entry.uses);
        entry.rif = entry.rif.saturating_sub(1);
    }

    /// Uses the reply at `index` for one query: its RIF goes up by one (the query this client
    /// is about to send), and it is removed once its budget is spent. Returns the replica.
    pub fn use_entry(&mut self, index: usize) -> Option<ReplicaId> {
        let entry = self.live_mut().get_mut(index)?;
        entry.rif = entry.rif.saturating_add(1);
        entry.uses = entry.uses.saturating_add(1);
        let replica = entry.replica;
        if entry.uses >= entry.budget {
            self.remove(index);
        }
        Some(replica)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(replica: u32, at_ms: u64, budget: u32) -> Entry {
        Entry {
            replica: ReplicaId(replica),
            received: Time::from_millis(at_ms),
            rif: 1,
            latency: Duration::from_millis(5),
            latency_ns: 5_000_000,
            uses: 0,
            settled: 0,
            budget,
            others: 1,
            slot: 0,
        }
    }

    #[test]
    fn a_finished_query_lowers_its_reply_once_if_it_was_counted() {
        let mut pool = Pool::new(4, Duration::from_secs(1));
        let mut reply = entry(1, 10, 8);
        reply.rif = 3;
        pool.insert(reply);
        let rif = |pool: &Pool| pool.get(0).map(|e| e.rif);
        // Sent before the reply came: in the reported RIF.
        pool.on_finished(ReplicaId(1), Time::from_millis(5));
        assert_eq!(rif(&pool), Some(2));
        // Sent since, but not on the reply: never counted.
        pool.on_finished(ReplicaId(1), Time::from_millis(11));
        assert_eq!(rif(&pool), Some(2));
        // Two uses; only two of the queries sent since can take their one back.
        pool.use_entry(0);
        pool.use_entry(0);
        assert_eq!(rif(&pool), Some(4));
        for _ in 0..3 {
            pool.on_finished(ReplicaId(1), Time::from_millis(12));
        }
        assert_eq!(rif(&pool), Some(2));
        // Never below zero, and other replicas' replies are untouched.
        for _ in 0..5 {
            pool.on_finished(ReplicaId(1), Time::from_millis(1));
        }
        assert_eq!(rif(&pool), Some(0));
        pool.on_finished(ReplicaId(2), Time::from_millis(1));
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn a_use_given_back_lowers_only_the_same_reply() {
        let mut pool = Pool::new(4, Duration::from_secs(1));
        pool.insert(entry(1, 10, 8));
        pool.use_entry(0);
        pool.use_entry(0);
        let state = |pool: &Pool| pool.get(0).map(|e| (e.uses, e.rif));
        assert_eq!(state(&pool), Some((2, 3)));
        // Another reply's use (an older one, since replaced) changes nothing.
        pool.unuse(ReplicaId(1), Time::from_millis(9));
        assert_eq!(state(&pool), Some((2, 3)));
        pool.unuse(ReplicaId(1), Time::from_millis(10));
        assert_eq!(state(&pool), Some((1, 2)));
        pool.unuse(ReplicaId(1), Time::from_millis(10));
        pool.unuse(ReplicaId(1), Time::from_millis(10));
        assert_eq!(state(&pool), Some((0, 1)));
        pool.unuse(ReplicaId(2), Time::from_millis(10));
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn a_reply_split_into_the_others_share_counts_this_clients_queries_live() {
        let mut pool = Pool::new(4, Duration::from_secs(1));
        let mut reply = entry(1, 10, 8);
        reply.rif = 5;
        // Two of the five are this client's: three are the others'.
        pool.insert(reply.clone().with_own(Some(2)));
        let rif = |pool: &Pool| pool.get(0).map(|e| (e.others, e.rif));
        assert_eq!(rif(&pool), Some((3, 5)));
        // This client's count moves the RIF both ways, the others' share stays.
        pool.set_own(ReplicaId(1), 4);
        assert_eq!(rif(&pool), Some((3, 7)));
        pool.set_own(ReplicaId(1), 0);
        assert_eq!(rif(&pool), Some((3, 3)));
        // A finished query settles as without the split, then the count is set.
        pool.on_finished_with_own(ReplicaId(1), Some(Time::from_millis(5)), 1);
        assert_eq!(rif(&pool), Some((3, 4)));
        // A use sent at the instant the reply came (a query the reply released) settles when
        // it finishes, so the reply's latency is no longer raised for it; without the split
        // it does not (the older accounting).
        let raised = |pool: &Pool| pool.get(0).map(|e| e.uses - e.settled);
        pool.use_entry(0);
        assert_eq!(raised(&pool), Some(1));
        pool.on_finished(ReplicaId(1), Time::from_millis(10));
        assert_eq!(raised(&pool), Some(1));
        pool.on_finished_with_own(ReplicaId(1), Some(Time::from_millis(10)), 1);
        assert_eq!(raised(&pool), Some(0));
        // More of this client's queries in flight than the replica reported (some were still
        // on the way): none are the others', and the RIF is this client's own.
        pool.insert(
            Entry {
                received: Time::from_millis(11),
                ..reply
            }
            .with_own(Some(9)),
        );
        assert_eq!(rif(&pool), Some((0, 9)));
        // Without a count the reply keeps the reported RIF as the others' share.
        let plain = Entry::new(
            ReplicaId(2),
            Time::from_millis(12),
            &crate::testing::report(4, 5),
            8,
            0,
        );
        pool.insert(plain.with_own(None));
        assert_eq!(pool.get(1).map(|e| (e.others, e.rif)), Some((4, 4)));
        // A replica with no reply held is ignored.
        pool.set_own(ReplicaId(3), 3);
        pool.on_finished_with_own(ReplicaId(3), None, 3);
        assert_eq!(pool.len(), 2);
    }

    #[test]
    fn a_piggybacked_report_refreshes_only_a_held_reply_and_keeps_its_budget() {
        let mut pool = Pool::new(4, Duration::from_secs(1));
        pool.insert(entry(1, 10, 3));
        pool.insert(entry(2, 20, 5));
        pool.use_entry(0);
        pool.use_entry(0);
        let report = |rif, ms| LoadReport {
            rif,
            latency: Duration::from_millis(ms),
            ..LoadReport::default()
        };
        // Replica 3 has no reply held: its report is left out.
        assert!(!pool.refresh(ReplicaId(3), &report(0, 1), Time::from_millis(30), None));
        assert_eq!(pool.len(), 2);
        // Replica 1's reply (used twice, RIF 3) takes the report's place, now the newest.
        assert!(pool.refresh(ReplicaId(1), &report(7, 9), Time::from_millis(30), None));
        assert_eq!(pool.len(), 2);
        let fresh = pool.get(1).unwrap();
        assert_eq!(fresh.replica, ReplicaId(1));
        assert_eq!((fresh.rif, fresh.latency_ns), (7, 9_000_000));
        assert_eq!(fresh.received, Time::from_millis(30));
        assert_eq!((fresh.uses, fresh.settled, fresh.budget), (0, 0, 3));
        assert_eq!(pool.get(0).unwrap().replica, ReplicaId(2));
        // A query of this client sent before the report finishes: it was in the report's RIF.
        pool.on_finished(ReplicaId(1), Time::from_millis(25));
        assert_eq!(pool.get(1).unwrap().rif, 6);
        // A report older than the reply held changes nothing.
        assert!(!pool.refresh(ReplicaId(2), &report(0, 1), Time::from_millis(15), None));
        assert_eq!(pool.get(0).unwrap().rif, 1);
    }

    #[test]
    fn a_reply_latency_grows_with_this_client_queries_still_on_it() {
        let mut pool = Pool::new(4, Duration::from_secs(1));
        let mut reply = entry(1, 10, 8);
        reply.rif = 3;
        reply.latency_ns = 10_000_000;
        pool.insert(reply);
        let latency = |pool: &Pool| pool.get(0).map(Entry::latency_with_own_queries_ns);
        assert_eq!(latency(&pool), Some(10_000_000), "as reported");
        // Two queries on it: RIF 5, and 10 ms × (5 + 1) / (3 + 1).
        pool.use_entry(0);
        pool.use_entry(0);
        assert_eq!(latency(&pool), Some(15_000_000));
        // One of them finished: RIF 4, one left, 10 ms × 5 / 4.
        pool.on_finished(ReplicaId(1), Time::from_millis(12));
        assert_eq!(latency(&pool), Some(12_500_000));
        // A query that was in flight when the reply came lowers the RIF but was never this
        // client's addition: 10 ms × 4 / 3.
        pool.on_finished(ReplicaId(1), Time::from_millis(5));
        assert_eq!(latency(&pool), Some(13_333_333));
        pool.on_finished(ReplicaId(1), Time::from_millis(12));
        assert_eq!(latency(&pool), Some(10_000_000), "all of its own finished");
    }

    #[test]
    fn evicts_oldest_when_full() {
        let mut pool = Pool::new(2, Duration::from_secs(1));
        assert!(pool.insert(entry(1, 0, 1)).is_none());
        assert!(pool.insert(entry(2, 1, 1)).is_none());
        let evicted = pool.insert(entry(3, 2, 1));
        assert_eq!(evicted.map(|e| e.replica), Some(ReplicaId(1)));
        let ids: Vec<u32> = pool.iter().map(|e| e.replica.0).collect();
        assert_eq!(ids, vec![2, 3]);
        // A reply stamped earlier than the newest still lands in receipt order.
        pool.insert(entry(4, 1, 1));
        let ids: Vec<u32> = pool.iter().map(|e| e.replica.0).collect();
        assert_eq!(ids, vec![4, 3]);
    }

    #[test]
    fn the_slots_the_oldest_replies_leave_are_reused() {
        let mut pool = Pool::new(4, Duration::from_secs(1));
        let room = pool.entries.capacity();
        for at in 0..1000 {
            pool.insert(entry(at % 7, at.into(), 1));
            if at % 3 == 0 {
                pool.remove(1.min(pool.len() - 1));
            }
        }
        assert_eq!(pool.entries.capacity(), room, "the vector never grew");
        // Still in receipt order, the newest last.
        let times: Vec<Time> = pool.iter().map(|e| e.received).collect();
        assert!(times.is_sorted() && times.len() <= 4, "{times:?}");
        assert_eq!(times.last(), Some(&Time::from_millis(999)));
        while pool.remove(0).is_some() {}
        assert!(pool.is_empty() && pool.iter().next().is_none());
        assert_eq!(pool.entries.capacity(), room);
    }

    #[test]
    fn a_large_pool_grows_its_vector_to_twice_its_capacity_and_no_further() {
        // A vector no larger than the pool would be compacted (every reply moved) on every
        // insert that evicts the oldest.
        let mut pool = Pool::new(128, Duration::from_secs(1));
        for at in 0..10_000_u32 {
            pool.insert(entry(at, at.into(), 1));
        }
        assert_eq!(pool.len(), 128);
        let room = pool.entries.capacity();
        assert!((2 * 128..4 * 128).contains(&room), "{room}");
        let times: Vec<Time> = pool.iter().map(|e| e.received).collect();
        assert!(times.is_sorted(), "{times:?}");
        assert_eq!(times.first(), Some(&Time::from_millis(10_000 - 128)));
    }

    #[test]
    fn one_reply_per_replica_newest_wins() {
        let mut pool = Pool::new(4, Duration::from_secs(1));
        pool.insert(entry(1, 0, 1));
        pool.insert(entry(2, 1, 1));
        let superseded = pool.insert(entry(1, 2, 3));
        assert_eq!(superseded.map(|e| e.received), Some(Time::from_millis(0)));
        let held: Vec<(u32, u64)> = pool
            .iter()
            .map(|e| (e.replica.0, e.received.as_nanos() / 1_000_000))
            .collect();
        assert_eq!(held, vec![(2, 1), (1, 2)]);
        // An older reply for a replica already held is ignored.
        assert!(pool.insert(entry(1, 1, 1)).is_none());
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.get(1).map(|e| e.budget), Some(3));
    }

    #[test]
    fn expires_by_age_and_spends_budget() {
        let mut pool = Pool::new(4, Duration::from_millis(100));
        pool.insert(entry(1, 0, 2));
        pool.insert(entry(2, 50, 0));
        assert_eq!(
            pool.get(1).map(|e| e.budget),
            Some(1),
            "zero budget raised to one"
        );
        assert_eq!(pool.use_entry(0), Some(ReplicaId(1)));
        assert_eq!(pool.get(0).map(|e| (e.rif, e.uses_left())), Some((2, 1)));
        assert_eq!(pool.use_entry(0), Some(ReplicaId(1)));
        assert_eq!(pool.len(), 1, "budget of two spent");
        pool.insert(entry(3, 120, 1));
        assert_eq!(pool.expire(Time::from_millis(151)), 1);
        assert_eq!(pool.get(0).map(|e| e.replica), Some(ReplicaId(3)));
        pool.remove_replica(ReplicaId(3));
        assert!(pool.is_empty());
    }

    proptest::proptest! {
        /// Whatever happens to the pool, its record of which replicas it holds matches its
        /// entries, and it holds at most one reply per replica.
        #[test]
        fn held_matches_the_entries(
            ops in proptest::collection::vec((0u8..6, 0u32..12, 0u64..50), 1..200),
        ) {
            let mut pool = Pool::new(4, Duration::from_millis(20));
            let mut now = 0;
            for (op, id, arg) in ops {
                // A few ids beyond the bitset, which are always searched for.
                let id = if id >= 10 { HELD_IDS + id } else { id };
                now += arg % 3;
                match op {
                    0 | 1 => {
                        pool.insert(entry(id, now, 1 + (arg % 3) as u32));
                    }
                    2 => {
                        pool.expire(Time::from_millis(now));
                    }
                    3 => {
                        if !pool.is_empty() {
                            pool.use_entry(arg as usize % pool.len());
                        }
                    }
                    4 => {
                        if !pool.is_empty() {
                            pool.remove(arg as usize % pool.len());
                        }
                    }
                    _ => {
                        if arg % 2 == 0 {
                            pool.remove_replica(ReplicaId(id));
                        } else {
                            pool.set_capacity(1 + arg as usize % 5);
                        }
                    }
                }
                for probe in (0..10).chain(HELD_IDS + 10..HELD_IDS + 12) {
                    let replica = ReplicaId(probe);
                    let scan = pool.iter().position(|e| e.replica == replica);
                    proptest::prop_assert_eq!(pool.position(replica), scan);
                    proptest::prop_assert!(pool.iter().filter(|e| e.replica == replica).count() <= 1);
                }
            }
        }
    }
}
