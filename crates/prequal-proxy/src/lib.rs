//! The prequal proxy (not built yet; see the proxy issue).
