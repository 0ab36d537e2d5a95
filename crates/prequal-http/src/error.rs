//! The boxed error type that hyper and tower pass around ([`BoxError`]).

/// A boxed error, as hyper and tower pass them around.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
