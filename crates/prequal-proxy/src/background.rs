//! Background work: what a part of the proxy needs running for as long as it lives (a
//! cluster's timer, its discovery watch of a file or DNS name, the watch of a cluster's or the
//! listener's TLS files), returned by its constructor as futures instead of spawned there. The server spawns them on the runtime it serves from, so a constructor neither needs
//! a runtime nor, outside one, silently leaves its timers out. Each future holds a weak
//! reference to its owner and ends once the owner is dropped (a cluster replaced by a reload).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// One piece of background work.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Background work to spawn; see the module docs.
#[must_use = "background work does nothing until it is spawned"]
#[derive(Default)]
pub struct Background(Vec<Task>);

impl Background {
    /// No work.
    pub fn none() -> Self {
        Background(Vec::new())
    }

    /// One future to run.
    pub fn one(task: impl Future<Output = ()> + Send + 'static) -> Self {
        Background(vec![Box::pin(task)])
    }

    /// Adds `other`'s work to this.
    pub fn add(&mut self, other: Background) {
        self.0.extend(other.0);
    }

    /// How many futures there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The futures, for the caller to spawn.
    pub fn into_tasks(self) -> Vec<Task> {
        self.0
    }
}

impl fmt::Debug for Background {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Background({} tasks)", self.0.len())
    }
}
