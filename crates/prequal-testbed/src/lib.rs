//! The live testbed (being built).
