//! [`BoxError`], the boxed error the balancer, its endpoints and its probes pass around, as
//! tower and hyper do. Re-exported from the crate root.

/// A boxed error, as tower and hyper pass them around.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
