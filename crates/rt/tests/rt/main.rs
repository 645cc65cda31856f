//! Integration tests for firmtime-rt. Tests that need privileges print a
//! skip reason and return when they are missing.

mod common;
