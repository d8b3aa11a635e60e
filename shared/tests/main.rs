//! The library's tests through its public interface, in one binary: the parsers of external
//! input under property tests, and the rendered emails against their snapshots.

mod bad_input;
mod definition;
mod templates;
