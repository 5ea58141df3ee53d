//! `junit` on a 20,000-test nextest report (3.4 MiB, every tenth test skipped): the
//! rewrite into a new file (`mark_skipped`: two streaming passes, a temporary file, fsync,
//! rename), beside two baselines on the same file: a plain quick-xml read + write copy that
//! changes nothing (one pass, same buffers), and `std::fs::copy`.
//!
//! Run with `cargo bench --bench junit`; see BENCHMARKS.md for figures.
#![allow(missing_docs)]

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use gpu_test_permit_cli::junit::{Skip, mark_skipped};
use quick_xml::Writer;
use quick_xml::events::Event;
use quick_xml::reader::Reader;

const TESTS: usize = 20_000;
const SUITES: usize = 20;

/// A report as nextest writes it: `SUITES` binaries, tests that passed self-closing, every
/// fifth with captured output (as with `store-success-output`).
fn report() -> String {
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"nextest-run\" \
         tests=\"{TESTS}\" skipped=\"0\" failures=\"0\" errors=\"0\" \
         uuid=\"0b21430d-56d4-438d-b4b6-b0d0e0ead151\" \
         timestamp=\"2026-11-24T10:00:00.000+00:00\" time=\"812.500\">\n"
    );
    let per_suite = TESTS / SUITES;
    for s in 0..SUITES {
        writeln!(
            xml,
            "    <testsuite name=\"gpu-suite::bin{s}\" tests=\"{per_suite}\" disabled=\"0\" \
             errors=\"0\" failures=\"0\">"
        )
        .unwrap();
        for t in 0..per_suite {
            let open = format!(
                "        <testcase name=\"kernels::case_{t:04}_matches_cpu\" \
                 classname=\"gpu-suite::bin{s}\" timestamp=\"2026-11-24T10:00:00.000+00:00\" \
                 time=\"0.041\""
            );
            if t % 5 == 0 {
                writeln!(
                    xml,
                    "{open}>\n            <system-out>running 1 test\ntest ... ok &amp; \
                     done\n</system-out>\n            <system-err>gpu-test-permit: waited 3 ms \
                     for a permit\n</system-err>\n        </testcase>"
                )
                .unwrap();
            } else {
                writeln!(xml, "{open}/>").unwrap();
            }
        }
        xml.push_str("    </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// Every tenth test skipped.
fn skips() -> Vec<Skip> {
    let per_suite = TESTS / SUITES;
    (0..TESTS)
        .filter(|i| i % 10 == 0)
        .map(|i| {
            Skip::new(
                format!("gpu-suite::bin{}", i / per_suite),
                format!("kernels::case_{:04}_matches_cpu", i % per_suite),
                "cuda",
                "cuda not installed: libcuda.so.1 was not found",
            )
        })
        .collect()
}

/// The baseline: one quick-xml pass that reads every event and writes it back.
fn quick_xml_copy(from: &Path, to: &Path) {
    let mut reader =
        Reader::from_reader(BufReader::with_capacity(1 << 16, File::open(from).unwrap()));
    let mut writer = Writer::new(BufWriter::with_capacity(1 << 16, File::create(to).unwrap()));
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf).unwrap() {
            Event::Eof => break,
            e => writer.write_event(e).unwrap(),
        }
        buf.clear();
    }
    writer.into_inner().flush().unwrap();
}

fn junit(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("junit.xml");
    let output = dir.path().join("marked.xml");
    let xml = report();
    std::fs::write(&input, &xml).unwrap();
    let skips = skips();
    let marked = mark_skipped(&input, &output, &skips).unwrap();
    assert_eq!(marked.testcases, (TESTS / 10) as u64);
    eprintln!(
        "report: {TESTS} tests, {:.1} MiB; {} skips",
        xml.len() as f64 / (1 << 20) as f64,
        skips.len()
    );

    let mut g = c.benchmark_group("junit_20k");
    g.sample_size(20);
    g.bench_function("mark_skipped/gpu-test-permit", |b| {
        b.iter(|| mark_skipped(&input, &output, &skips).unwrap())
    });
    g.bench_function("quick-xml-copy/baseline", |b| {
        b.iter(|| quick_xml_copy(&input, &output))
    });
    g.bench_function("fs-copy/baseline", |b| {
        b.iter(|| std::fs::copy(&input, &output).unwrap())
    });
    g.finish();
}

criterion_group!(benches, junit);
criterion_main!(benches);
