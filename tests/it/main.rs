//! Integration tests, one binary split by topic (fewer binaries, faster links).

mod cli;
mod config;
mod host;
mod permit;
mod stress;
mod trace;
mod util;
