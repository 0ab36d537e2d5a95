//! The prequal simulator (being built).
