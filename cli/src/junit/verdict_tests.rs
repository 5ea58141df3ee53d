//! Verdicts in the report: byte-exact rewrites.

use super::*;

const SAID: &str =
    "teardown fault: `gpu` died by SIGSEGV after all 1 of its tests had their results";

const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="5" skipped="0" failures="1" errors="0" uuid="0b21430d-56d4-438d-b4b6-b0d0e0ead151">
    <testsuite name="suite::gpu" tests="5" disabled="0" errors="0" failures="1">
        <testcase name="teardown" classname="suite::gpu" time="0.1"/>
        <testcase name="with_err" classname="suite::gpu" time="0.1">
            <system-out>out</system-out>
            <system-err>warning: slow &amp; steady</system-err>
        </testcase>
        <testcase name="crashed" classname="suite::gpu" time="0.1">
            <failure type="test failure">process died</failure>
            <system-out></system-out>
            <system-err>thread panicked
</system-err>
        </testcase>
        <testcase name="flaky" classname="suite::gpu" time="0.1">
            <flakyFailure type="test failure"><system-err>first</system-err></flakyFailure>
        </testcase>
        <testcase name="untouched" classname="suite::gpu" time="0.1"/>
    </testsuite>
</testsuites>
"#;

fn verdict(test: &str, fault: &str, ended: &str, said: &str) -> Verdict {
    Verdict::new("suite::gpu", test, fault, ended, said)
}

fn teardown(test: &str) -> Verdict {
    verdict(test, "teardown", "SIGSEGV", SAID)
}

fn run(report: &str, skips: &[Skip], verdicts: &[Verdict]) -> (String, Marked) {
    let (out, marked) = mark_in(report.as_bytes(), skips, verdicts).unwrap();
    (String::from_utf8(out).unwrap(), marked)
}

const PROPERTY: &str = r#"<property name="gpu-test-permit.verdict" value="teardown: SIGSEGV"/>"#;

#[test]
fn a_self_closing_passed_testcase_gets_properties_first_and_system_err_last() {
    let (xml, marked) = run(REPORT, &[], &[teardown("teardown")]);
    let expected = REPORT.replace(
        r#"        <testcase name="teardown" classname="suite::gpu" time="0.1"/>"#,
        &format!(
            "        <testcase name=\"teardown\" classname=\"suite::gpu\" time=\"0.1\">\n            \
             <properties>\n                {PROPERTY}\n            </properties>\n            \
             <system-err>gpu-test-permit: {SAID}</system-err>\n        </testcase>"
        ),
    );
    assert_eq!(xml, expected);
    assert_eq!(marked.verdict_testcases, 1);
    assert_eq!(marked.verdicts, [teardown("teardown")]);
    assert_eq!(marked.testcases, 0);
    assert!(marked.verdicts_left.is_empty() && marked.verdicts_unmatched.is_empty());
}

#[test]
fn a_line_is_appended_to_an_existing_system_err() {
    let (xml, marked) = run(REPORT, &[], &[teardown("with_err")]);
    let expected = REPORT.replace(
        "        <testcase name=\"with_err\" classname=\"suite::gpu\" time=\"0.1\">\n            \
         <system-out>out</system-out>\n            \
         <system-err>warning: slow &amp; steady</system-err>",
        &format!(
            "        <testcase name=\"with_err\" classname=\"suite::gpu\" time=\"0.1\">\n            \
             <properties>\n                {PROPERTY}\n            </properties>\n            \
             <system-out>out</system-out>\n            \
             <system-err>warning: slow &amp; steady\ngpu-test-permit: {SAID}</system-err>"
        ),
    );
    assert_eq!(xml, expected);
    assert_eq!(marked.verdict_testcases, 1);
}

#[test]
fn a_failed_test_with_a_crash_stays_failed_and_is_marked() {
    let crash = verdict(
        "crashed",
        "crash",
        "SIGABRT",
        "crash: `gpu` died by SIGABRT while crashed ran",
    );
    let (xml, marked) = run(REPORT, &[], std::slice::from_ref(&crash));
    // The text ended with a line break: the line follows it directly. The failure stays, and
    // the counts too.
    let expected = REPORT.replace(
        "        <testcase name=\"crashed\" classname=\"suite::gpu\" time=\"0.1\">\n            \
         <failure type=\"test failure\">process died</failure>\n            \
         <system-out></system-out>\n            \
         <system-err>thread panicked\n</system-err>",
        "        <testcase name=\"crashed\" classname=\"suite::gpu\" time=\"0.1\">\n            \
         <properties>\n                \
         <property name=\"gpu-test-permit.verdict\" value=\"crash: SIGABRT\"/>\n            \
         </properties>\n            \
         <failure type=\"test failure\">process died</failure>\n            \
         <system-out></system-out>\n            \
         <system-err>thread panicked\n\
         gpu-test-permit: crash: `gpu` died by SIGABRT while crashed ran</system-err>",
    );
    assert_eq!(xml, expected);
    assert_eq!(marked.verdict_testcases, 1);
    assert_eq!(marked.verdicts, [crash]);
    assert_eq!(xml.matches("<failure").count(), 1);
}

#[test]
fn a_flaky_tests_own_system_err_is_new_not_its_attempts() {
    let (xml, _) = run(REPORT, &[], &[teardown("flaky")]);
    let expected = REPORT.replace(
        "        <testcase name=\"flaky\" classname=\"suite::gpu\" time=\"0.1\">\n            \
         <flakyFailure type=\"test failure\"><system-err>first</system-err></flakyFailure>\n        \
         </testcase>",
        &format!(
            "        <testcase name=\"flaky\" classname=\"suite::gpu\" time=\"0.1\">\n            \
             <properties>\n                {PROPERTY}\n            </properties>\n            \
             <flakyFailure type=\"test failure\"><system-err>first</system-err></flakyFailure>\n            \
             <system-err>gpu-test-permit: {SAID}</system-err>\n        </testcase>"
        ),
    );
    assert_eq!(xml, expected);
}

#[test]
fn tests_without_verdicts_and_everything_else_stay_byte_for_byte() {
    let (xml, marked) = run(
        REPORT,
        &[],
        &[
            teardown("not in the report"),
            Verdict::new("other binary", "teardown", "hang", "hung at exit", "hung"),
        ],
    );
    assert_eq!(xml, REPORT);
    assert_eq!(marked.verdict_testcases, 0);
    assert_eq!(marked.verdicts_unmatched.len(), 2);

    // Every testcase marked: the untouched one is as it was, the counts are.
    let all: Vec<Verdict> = ["teardown", "with_err", "crashed", "flaky"]
        .into_iter()
        .map(teardown)
        .collect();
    let (xml, marked) = run(REPORT, &[], &all);
    assert_eq!(marked.verdict_testcases, 4);
    assert!(xml.contains(
        "\n        <testcase name=\"untouched\" classname=\"suite::gpu\" time=\"0.1\"/>\n"
    ));
    assert!(xml.contains(
        r#"<testsuites name="nextest-run" tests="5" skipped="0" failures="1" errors="0" uuid="#
    ));
    assert!(xml.contains(
        r#"<testsuite name="suite::gpu" tests="5" disabled="0" errors="0" failures="1">"#
    ));
    assert_eq!(xml.matches("<properties>").count(), 4);
}

#[test]
fn text_and_values_are_escaped() {
    let v = verdict(
        "teardown",
        "teardown",
        "exit code <3> & \"more\"",
        "died <\"quoted\" & 'single'>\rcr\ttab\u{1b}[31m ]]> end",
    );
    let (xml, _) = run(REPORT, &[], std::slice::from_ref(&v));
    assert!(
        xml.contains(
            r#"<property name="gpu-test-permit.verdict" value="teardown: exit code &lt;3&gt; &amp; &quot;more&quot;"/>"#
        ),
        "{xml}"
    );
    assert!(
        xml.contains(
            "<system-err>gpu-test-permit: died &lt;\"quoted\" &amp; 'single'&gt;&#13;cr\ttab\\u{1b}[31m ]]&gt; end</system-err>"
        ),
        "{xml}"
    );
    // A parser reads both back.
    let mut reader = Reader::from_str(&xml);
    let (mut value, mut err) = (None, String::new());
    let mut in_err = false;
    loop {
        match reader.read_event().unwrap() {
            Event::Empty(e) if e.name().as_ref() == "property" => {
                value = attribute(&e, "value", 0).unwrap();
            }
            Event::Start(e) if e.name().as_ref() == "system-err" => in_err = true,
            Event::End(e) if e.name().as_ref() == "system-err" => {
                if err.starts_with("gpu-test-permit:") {
                    break;
                }
                in_err = false;
                err.clear();
            }
            Event::Text(t) if in_err => err.push_str(&t),
            Event::GeneralRef(r) if in_err => {
                let c = match r.resolve_char_ref().unwrap() {
                    Some(c) => c.to_string(),
                    None => quick_xml::escape::resolve_predefined_entity(&r)
                        .unwrap()
                        .to_string(),
                };
                err.push_str(&c);
            }
            Event::Eof => panic!("no system-err"),
            _ => {}
        }
    }
    assert_eq!(value.as_deref(), Some("teardown: exit code <3> & \"more\""));
    assert_eq!(
        err,
        format!("gpu-test-permit: {}", v.said.replace('\u{1b}', "\\u{1b}"))
    );
}

#[test]
fn a_skip_and_a_verdict_on_one_testcase_properties_first() {
    let skip = Skip::new("suite::gpu", "teardown", "cuda", "not installed");
    let (xml, marked) = run(REPORT, std::slice::from_ref(&skip), &[teardown("teardown")]);
    assert!(
        xml.contains(&format!(
            "<testcase name=\"teardown\" classname=\"suite::gpu\" time=\"0.1\">\n            \
             <properties>\n                {PROPERTY}\n            </properties>\n            \
             <skipped message=\"backend=cuda: not installed\"/>\n            \
             <system-err>gpu-test-permit: {SAID}</system-err>\n        </testcase>"
        )),
        "{xml}"
    );
    assert_eq!((marked.testcases, marked.verdict_testcases), (1, 1));
    assert!(xml.contains(r#"tests="5" skipped="1" failures="1""#));
}

#[test]
fn existing_properties_take_the_verdicts_and_a_skip_follows_them() {
    let report = "<testsuite name=\"b\" tests=\"3\">\n\
                  \t<testcase name=\"t\" classname=\"b\">\n\
                  \t\t<properties>\n\
                  \t\t\t<property name=\"owner\" value=\"gpu team\"/>\n\
                  \t\t</properties>\n\
                  \t</testcase>\n\
                  \t<testcase name=\"u\" classname=\"b\">\n\
                  \t\t<properties/>\n\
                  \t\t<system-err/>\n\
                  \t</testcase>\n\
                  \t<testcase name=\"v\" classname=\"b\"><properties></properties></testcase>\n\
                  </testsuite>\n";
    let skip = Skip::new("b", "t", "cuda", "not installed");
    let verdicts = [
        Verdict::new("b", "t", "teardown", "SIGSEGV", "one"),
        Verdict::new("b", "u", "hang", "hung at exit", "two"),
        Verdict::new("b", "t", "teardown", "exit code 3", "three"),
        Verdict::new("b", "v", "teardown", "SIGBUS", "four"),
    ];
    let (xml, marked) = run(report, std::slice::from_ref(&skip), &verdicts);
    assert_eq!(
        xml,
        "<testsuite name=\"b\" tests=\"3\" skipped=\"1\">\n\
         \t<testcase name=\"t\" classname=\"b\">\n\
         \t\t<properties>\n\
         \t\t\t<property name=\"owner\" value=\"gpu team\"/>\n\
         \t\t\t<property name=\"gpu-test-permit.verdict\" value=\"teardown: SIGSEGV\"/>\n\
         \t\t\t<property name=\"gpu-test-permit.verdict\" value=\"teardown: exit code 3\"/>\n\
         \t\t</properties>\n\
         \t\t<skipped message=\"backend=cuda: not installed\"/>\n\
         \t\t<system-err>gpu-test-permit: one\ngpu-test-permit: three</system-err>\n\
         \t</testcase>\n\
         \t<testcase name=\"u\" classname=\"b\">\n\
         \t\t<properties>\n\
         \t\t\t<property name=\"gpu-test-permit.verdict\" value=\"hang: hung at exit\"/>\n\
         \t\t</properties>\n\
         \t\t<system-err>gpu-test-permit: two</system-err>\n\
         \t</testcase>\n\
         \t<testcase name=\"v\" classname=\"b\"><properties>\
         <property name=\"gpu-test-permit.verdict\" value=\"teardown: SIGBUS\"/></properties>\
         <system-err>gpu-test-permit: four</system-err></testcase>\n\
         </testsuite>\n"
    );
    assert_eq!((marked.testcases, marked.verdict_testcases), (1, 3));
    assert_eq!(marked.verdicts, verdicts);
}

#[test]
fn compact_xml_and_text_that_ends_in_a_cdata_or_a_line_break_reference() {
    let report = "<testsuite name=\"b\" tests=\"3\">\
                  <testcase name=\"t\" classname=\"b\"/>\
                  <testcase name=\"u\" classname=\"b\"><system-err><![CDATA[raw\n]]></system-err></testcase>\
                  <testcase name=\"v\" classname=\"b\"><system-err>x&#10;</system-err><system-err>y &lt;</system-err></testcase>\
                  </testsuite>";
    let verdicts = [
        Verdict::new("b", "t", "teardown", "SIGSEGV", "one"),
        Verdict::new("b", "u", "teardown", "SIGSEGV", "two"),
        Verdict::new("b", "v", "teardown", "SIGSEGV", "three"),
    ];
    let (xml, _) = run(report, &[], &verdicts);
    let p = format!("<properties>{PROPERTY}</properties>");
    assert_eq!(
        xml,
        format!(
            "<testsuite name=\"b\" tests=\"3\">\
             <testcase name=\"t\" classname=\"b\">{p}<system-err>gpu-test-permit: one</system-err></testcase>\
             <testcase name=\"u\" classname=\"b\">{p}<system-err><![CDATA[raw\n]]>gpu-test-permit: two</system-err></testcase>\
             <testcase name=\"v\" classname=\"b\">{p}<system-err>x&#10;</system-err><system-err>y &lt;\ngpu-test-permit: three</system-err></testcase>\
             </testsuite>"
        )
    );
}

#[test]
fn a_report_marked_before_is_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junit.xml");
    std::fs::write(&path, REPORT).unwrap();
    let verdicts = [teardown("teardown"), teardown("crashed")];
    let marked = mark(&path, &path, &[], &verdicts).unwrap();
    assert!(marked.written);
    assert_eq!(marked.verdict_testcases, 2);
    let once = std::fs::read_to_string(&path).unwrap();
    let (expected, _) = run(REPORT, &[], &verdicts);
    assert_eq!(once, expected);

    let marked = mark(&path, &path, &[], &verdicts).unwrap();
    assert!(!marked.written);
    assert_eq!(marked.verdict_testcases, 0);
    assert_eq!(
        marked.verdicts_left,
        verdicts.map(|v| (v, Left::AlreadyMarked))
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), once);
}
