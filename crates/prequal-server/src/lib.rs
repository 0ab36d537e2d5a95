//! The replica side of prequal (being built).
