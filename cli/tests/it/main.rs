//! Integration tests, one binary split by topic (fewer binaries, faster links).

#![allow(missing_docs, unreachable_pub)]

mod adoption;
mod backfill;
mod cap;
mod cap_breaks;
#[cfg(feature = "cuda")]
mod capture;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod ci;
mod cli;
#[cfg(target_os = "linux")]
mod clocks;
mod config;
mod decision;
mod devices;
mod dirs;
mod doc_examples;
mod docs;
mod ephemeral;
#[cfg(target_os = "linux")]
mod find_cap;
mod fixture;
mod hold_timeout;
mod holders;
mod host;
#[cfg(target_os = "linux")]
mod icd;
mod in_process;
mod inherit;
mod junit;
mod layering;
#[cfg(target_os = "linux")]
mod live;
#[cfg(target_os = "linux")]
mod live_memory;
mod multi_gpu;
#[cfg(target_os = "linux")]
mod native_probe;
mod permit;
mod platform;
#[cfg(target_os = "linux")]
mod private_dirs;
mod probe;
mod recipes;
mod report;
#[cfg(target_os = "linux")]
mod report_choice;
#[cfg(target_os = "linux")]
mod shared_dirs;
mod snippet_toml;
#[cfg(unix)]
mod squat;
mod stress;
mod stub;
#[cfg(unix)]
mod third_party;
mod trace;
mod truth;
mod tune;
mod util;
#[cfg(target_os = "linux")]
mod verdicts;
mod waiters;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod watch;
mod weighted;
mod weighted_processes;
