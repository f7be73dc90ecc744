//! fmt placeholder
