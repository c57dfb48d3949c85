//! Test bed.
