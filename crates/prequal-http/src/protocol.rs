//! The probe protocol, version 1: both sides, with no async or HTTP dependencies.
//!
//! A Prequal client asks a replica for its load with a tiny HTTP request and gets a tiny reply
//! (the paper, section 4: "the RIF comes from simply checking a counter"; the latency is the
//! median of recent latencies recorded at or near the current RIF). The full specification, for
//! teams answering probes from another language, is `docs/probe-protocol.md`; in short:
//!
//! - request: `GET /.prequal/probe?v=1` (see [`PROBE_PATH`]), with an optional `&hint=<u64>` in
//!   sync mode so a replica that can serve that query cheaply may report less load;
//! - reply: status 200 and one line of space-separated `key=value` fields in a fixed order,
//!   `v=1 rif=3 latency_us=1520 qps=812.5 utilization=0.43 error_rate=0.002`, of which the
//!   last three are optional; at most [`MAX_REPLY_LEN`] bytes;
//! - the same line may ride on any response in the [`LOAD_HEADER`] header (piggybacking).
//!
//! Parsing is strict: fields in order, each once, plain decimal numbers, nothing else. A reply
//! that breaks any rule is a [`ReplyError`] naming the field and what was wrong, which the
//! client treats as a failed probe. Nothing here panics on any input (a property test feeds it
//! arbitrary bytes).

use std::fmt::Write as _;
use std::time::Duration;

use prequal_core::LoadReport;

/// The reserved path a replica answers probes on.
pub const PROBE_PATH: &str = "/.prequal/probe";

/// The protocol version this module speaks.
pub const VERSION: u32 = 1;

/// The response header that carries a piggybacked load report (same encoding as a reply).
pub const LOAD_HEADER: &str = "prequal-load";

/// The longest reply (or load header value) a parser accepts, in bytes.
pub const MAX_REPLY_LEN: usize = 256;

/// The content type of a probe reply.
pub const REPLY_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// The largest qps a reply carries; larger values are clamped when encoding.
const MAX_QPS: f64 = 1e12;

/// The largest utilisation a reply carries (a replica may run over its allocation).
const MAX_UTILIZATION: f64 = 1e6;

/// How much of a bad value an error message quotes.
const QUOTE_LEN: usize = 24;

/// A parsed probe request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// The query hint (sync mode), if the client sent one.
    pub hint: Option<u64>,
}

/// Why a probe request was refused; the replica answers 400 (405 for a wrong method) with this
/// text in the body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The request had no query string, so no version.
    #[error("probe request has no `v` parameter (expected `?v={VERSION}`)")]
    MissingVersion,
    /// The client speaks a version this replica does not.
    #[error("probe request asks for version {0:?}; this replica speaks v={VERSION}")]
    UnsupportedVersion(String),
    /// A parameter this version does not define.
    #[error("probe request has unknown parameter {0:?} (v={VERSION} defines `v` and `hint`)")]
    UnknownParameter(String),
    /// A parameter given twice.
    #[error("probe request repeats parameter `{0}`")]
    DuplicateParameter(&'static str),
    /// A parameter without `=value`, or a value that is not what it should be.
    #[error("probe request parameter `{name}` has bad value {value:?} (expected {expected})")]
    BadValue {
        /// The parameter.
        name: &'static str,
        /// The value as sent (truncated).
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// Probes are `GET` (or `HEAD`).
    #[error("probe request uses method {0}; probes must be GET")]
    Method(String),
}

/// Why a probe reply (or load header) was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// Longer than [`MAX_REPLY_LEN`].
    #[error("probe reply is {0} bytes long (at most {MAX_REPLY_LEN} allowed)")]
    TooLong(usize),
    /// Not UTF-8 text.
    #[error("probe reply is not UTF-8 text")]
    NotText,
    /// A required field is absent.
    #[error("probe reply lacks field `{0}`")]
    Missing(&'static str),
    /// A token that is not the field expected at that place.
    #[error("probe reply has {found:?} where `{expected}` (or the end) was expected")]
    Unexpected {
        /// The field expected here.
        expected: &'static str,
        /// The token found (truncated).
        found: String,
    },
    /// A field whose value does not parse or is out of range.
    #[error("probe reply field `{field}` has bad value {value:?} (expected {expected})")]
    BadValue {
        /// The field.
        field: &'static str,
        /// The value as sent (truncated).
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A version this client does not speak.
    #[error("probe reply has version {0:?}; this client speaks v={VERSION}")]
    UnsupportedVersion(String),
}

/// The path and query of a probe request, for example `/.prequal/probe?v=1&hint=42`.
pub fn probe_path_and_query(hint: Option<u64>) -> String {
    let mut out = format!("{PROBE_PATH}?v={VERSION}");
    if let Some(hint) = hint {
        // Writing to a String cannot fail.
        let _ = write!(out, "&hint={hint}");
    }
    out
}

/// Parses the query string of a request to [`PROBE_PATH`] (the part after `?`, if any).
pub fn parse_probe_query(query: Option<&str>) -> Result<Probe, RequestError> {
    let query = query.ok_or(RequestError::MissingVersion)?;
    let mut version_seen = false;
    let mut probe = Probe::default();
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "v" => {
                if version_seen {
                    return Err(RequestError::DuplicateParameter("v"));
                }
                if value != "1" {
                    return Err(RequestError::UnsupportedVersion(quote(value)));
                }
                version_seen = true;
            }
            "hint" => {
                if probe.hint.is_some() {
                    return Err(RequestError::DuplicateParameter("hint"));
                }
                probe.hint =
                    Some(
                        parse_plain_uint(value).ok_or_else(|| RequestError::BadValue {
                            name: "hint",
                            value: quote(value),
                            expected: "a decimal integer from 0 to 2^64-1",
                        })?,
                    );
            }
            other => return Err(RequestError::UnknownParameter(quote(other))),
        }
    }
    if !version_seen {
        return Err(RequestError::MissingVersion);
    }
    Ok(probe)
}

/// Encodes a load report as a reply line (without a trailing newline).
///
/// Floats are written with a fixed number of decimals, clamped to the ranges the parser
/// accepts; NaN is left out, because a field that says nothing is better omitted.
pub fn encode_reply(report: &LoadReport) -> String {
    let mut out = String::with_capacity(96);
    let latency_us = u64::try_from(report.latency.as_micros()).unwrap_or(u64::MAX);
    let _ = write!(
        out,
        "v={VERSION} rif={} latency_us={latency_us}",
        report.rif
    );
    if let Some(qps) = report.qps.filter(|q| !q.is_nan()) {
        let _ = write!(out, " qps={:.3}", qps.clamp(0.0, MAX_QPS));
    }
    if let Some(util) = report.utilization.filter(|u| !u.is_nan()) {
        let _ = write!(out, " utilization={:.4}", util.clamp(0.0, MAX_UTILIZATION));
    }
    if let Some(err) = report.error_rate.filter(|e| !e.is_nan()) {
        let _ = write!(out, " error_rate={:.4}", err.clamp(0.0, 1.0));
    }
    out
}

/// Parses a reply body or a [`LOAD_HEADER`] value into a load report.
///
/// One trailing `\n` (or `\r\n`) is allowed; everything else must follow the format exactly.
pub fn parse_reply(bytes: &[u8]) -> Result<LoadReport, ReplyError> {
    if bytes.len() > MAX_REPLY_LEN {
        return Err(ReplyError::TooLong(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| ReplyError::NotText)?;
    let text = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text);
    let mut fields = Fields {
        tokens: text.split(' ').peekable(),
    };
    let version = fields.required("v")?;
    if version != "1" {
        return Err(ReplyError::UnsupportedVersion(quote(version)));
    }
    let rif = fields.required("rif")?;
    let rif = parse_plain_uint(rif)
        .and_then(|r| u32::try_from(r).ok())
        .ok_or_else(|| bad("rif", rif, "a decimal integer from 0 to 2^32-1"))?;
    let latency = fields.required("latency_us")?;
    let latency_us =
        parse_plain_uint(latency).ok_or_else(|| bad("latency_us", latency, "microseconds"))?;
    let qps = fields.optional_float("qps", MAX_QPS)?;
    let utilization = fields.optional_float("utilization", MAX_UTILIZATION)?;
    let error_rate = fields.optional_float("error_rate", 1.0)?;
    if let Some(extra) = fields.tokens.next() {
        return Err(ReplyError::Unexpected {
            expected: "end of reply",
            found: quote(extra),
        });
    }
    Ok(LoadReport {
        rif,
        latency: Duration::from_micros(latency_us),
        qps,
        utilization,
        error_rate,
    })
}

/// The tokens of a reply line, consumed in the protocol's fixed field order.
struct Fields<'a> {
    tokens: std::iter::Peekable<std::str::Split<'a, char>>,
}

impl<'a> Fields<'a> {
    /// The value of the next token, which must be `name=value`.
    fn required(&mut self, name: &'static str) -> Result<&'a str, ReplyError> {
        let token = self.tokens.next().ok_or(ReplyError::Missing(name))?;
        match token.split_once('=') {
            Some((key, value)) if key == name => Ok(value),
            _ if token.is_empty() => Err(ReplyError::Missing(name)),
            _ => Err(ReplyError::Unexpected {
                expected: name,
                found: quote(token),
            }),
        }
    }

    /// The value of `name` if the next token is that field, as a float in `0..=max`.
    fn optional_float(&mut self, name: &'static str, max: f64) -> Result<Option<f64>, ReplyError> {
        let Some(token) = self.tokens.peek() else {
            return Ok(None);
        };
        let Some(value) = token.strip_prefix(name).and_then(|v| v.strip_prefix('=')) else {
            return Ok(None);
        };
        self.tokens.next();
        let parsed = parse_plain_float(value)
            .filter(|v| *v <= max)
            .ok_or_else(|| bad(name, value, "a plain decimal number in range"))?;
        Ok(Some(parsed))
    }
}

fn bad(field: &'static str, value: &str, expected: &'static str) -> ReplyError {
    ReplyError::BadValue {
        field,
        value: quote(value),
        expected,
    }
}

/// A decimal integer: ASCII digits only (no sign, no spaces), at most 20 of them.
fn parse_plain_uint(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A non-negative decimal number: digits with at most one `.` between digits (no sign,
/// exponent, `inf` or `NaN`, which Rust's own float parser would accept).
fn parse_plain_float(text: &str) -> Option<f64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if text.len() > 40 || !digits(whole) || !digits(fraction) {
        return None;
    }
    text.parse().ok()
}

/// A bounded copy of untrusted text for an error message.
fn quote(text: &str) -> String {
    text.chars().take(QUOTE_LEN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn full_report() -> LoadReport {
        LoadReport {
            rif: 7,
            latency: Duration::from_micros(1520),
            qps: Some(812.5),
            utilization: Some(0.43),
            error_rate: Some(0.002),
        }
    }

    #[test]
    fn reply_round_trips() {
        let line = encode_reply(&full_report());
        assert_eq!(
            line,
            "v=1 rif=7 latency_us=1520 qps=812.500 utilization=0.4300 error_rate=0.0020"
        );
        assert_eq!(parse_reply(line.as_bytes()), Ok(full_report()));
        let minimal = LoadReport {
            rif: 0,
            latency: Duration::ZERO,
            ..LoadReport::default()
        };
        assert_eq!(encode_reply(&minimal), "v=1 rif=0 latency_us=0");
        assert_eq!(parse_reply(b"v=1 rif=0 latency_us=0\n"), Ok(minimal));
        assert_eq!(parse_reply(b"v=1 rif=0 latency_us=0\r\n"), Ok(minimal));
    }

    #[test]
    fn optional_fields_may_be_skipped_but_keep_their_order() {
        let report = parse_reply(b"v=1 rif=2 latency_us=9 error_rate=0.5");
        assert_eq!(report.map(|r| (r.qps, r.error_rate)), Ok((None, Some(0.5))));
        let swapped = parse_reply(b"v=1 rif=2 latency_us=9 error_rate=0.5 qps=3");
        assert!(matches!(swapped, Err(ReplyError::Unexpected { .. })));
    }

    #[test]
    fn encoder_clamps_and_drops_nan() {
        let report = LoadReport {
            qps: Some(f64::INFINITY),
            utilization: Some(f64::NAN),
            error_rate: Some(3.0),
            ..LoadReport::default()
        };
        let line = encode_reply(&report);
        assert!(!line.contains("utilization"));
        let parsed = parse_reply(line.as_bytes()).map(|r| (r.qps, r.error_rate));
        assert_eq!(parsed, Ok((Some(MAX_QPS), Some(1.0))));
        let max = LoadReport {
            rif: u32::MAX,
            latency: Duration::MAX,
            qps: Some(MAX_QPS),
            utilization: Some(MAX_UTILIZATION),
            error_rate: Some(1.0),
        };
        assert!(encode_reply(&max).len() <= MAX_REPLY_LEN);
        assert!(parse_reply(encode_reply(&max).as_bytes()).is_ok());
    }

    #[test]
    fn malformed_replies_name_what_is_wrong() {
        let cases: &[(&[u8], ReplyError)] = &[
            (b"", ReplyError::Missing("v")),
            (b"v=1", ReplyError::Missing("rif")),
            (
                b"v=2 rif=1 latency_us=1",
                ReplyError::UnsupportedVersion("2".into()),
            ),
            (
                b"v=1 rif=-1 latency_us=1",
                bad("rif", "-1", "a decimal integer from 0 to 2^32-1"),
            ),
            (
                b"v=1 rif=4294967296 latency_us=1",
                bad("rif", "4294967296", "a decimal integer from 0 to 2^32-1"),
            ),
            (
                b"v=1 rif=1 latency_us=1.5",
                bad("latency_us", "1.5", "microseconds"),
            ),
            (
                b"v=1 rif=1 latency_us=1 qps=NaN",
                bad("qps", "NaN", "a plain decimal number in range"),
            ),
            (
                b"v=1 rif=1 latency_us=1 qps=1e3",
                bad("qps", "1e3", "a plain decimal number in range"),
            ),
            (
                b"v=1 rif=1 latency_us=1 error_rate=1.5",
                bad("error_rate", "1.5", "a plain decimal number in range"),
            ),
            (b"v=1  rif=1 latency_us=1", ReplyError::Missing("rif")),
            (
                b"v=1 rif=1 latency_us=1 extra=1",
                ReplyError::Unexpected {
                    expected: "end of reply",
                    found: "extra=1".into(),
                },
            ),
            (
                b"v=1 latency_us=1 rif=1",
                ReplyError::Unexpected {
                    expected: "rif",
                    found: "latency_us=1".into(),
                },
            ),
            (b"\xff", ReplyError::NotText),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_reply(input).as_ref(), Err(expected), "{input:?}");
        }
        assert_eq!(parse_reply(&[b'v'; 300]), Err(ReplyError::TooLong(300)));
    }

    #[test]
    fn probe_requests_parse_strictly() {
        assert_eq!(parse_probe_query(Some("v=1")), Ok(Probe { hint: None }));
        assert_eq!(
            parse_probe_query(Some("hint=42&v=1")),
            Ok(Probe { hint: Some(42) })
        );
        assert_eq!(
            probe_path_and_query(Some(42)),
            "/.prequal/probe?v=1&hint=42"
        );
        assert_eq!(parse_probe_query(None), Err(RequestError::MissingVersion));
        assert_eq!(
            parse_probe_query(Some("")),
            Err(RequestError::UnknownParameter(String::new()))
        );
        assert_eq!(
            parse_probe_query(Some("hint=1")),
            Err(RequestError::MissingVersion)
        );
        assert_eq!(
            parse_probe_query(Some("v=2")),
            Err(RequestError::UnsupportedVersion("2".into()))
        );
        assert_eq!(
            parse_probe_query(Some("v=1&v=1")),
            Err(RequestError::DuplicateParameter("v"))
        );
        assert!(matches!(
            parse_probe_query(Some("v=1&hint=-3")),
            Err(RequestError::BadValue { name: "hint", .. })
        ));
        assert_eq!(
            parse_probe_query(Some("v=1&x=1")),
            Err(RequestError::UnknownParameter("x".into()))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_parsers(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_reply(&bytes);
            let text = String::from_utf8_lossy(&bytes);
            let _ = parse_probe_query(Some(&text));
        }

        #[test]
        fn near_miss_replies_never_panic(
            text in "(v=1 rif=[0-9]{0,12} latency_us=[0-9.e+-]{0,22})( qps=[0-9.eNa-]{0,10})?( utilization=[0-9.]{0,8})?( error_rate=[0-9.]{0,6})?[ \n]{0,2}"
        ) {
            let _ = parse_reply(text.as_bytes());
        }

        #[test]
        fn every_encoded_report_parses_back(
            rif in any::<u32>(),
            latency_us in any::<u64>(),
            qps in proptest::option::of(0.0f64..1e9),
            util in proptest::option::of(0.0f64..10.0),
            err in proptest::option::of(0.0f64..=1.0),
        ) {
            let report = LoadReport {
                rif,
                latency: Duration::from_micros(latency_us),
                qps,
                utilization: util,
                error_rate: err,
            };
            let parsed = parse_reply(encode_reply(&report).as_bytes());
            prop_assert!(parsed.is_ok(), "{:?}", parsed);
            if let Ok(parsed) = parsed {
                prop_assert_eq!(parsed.rif, rif);
                prop_assert_eq!(parsed.latency, report.latency);
                prop_assert_eq!(parsed.qps.is_some(), qps.is_some());
                if let (Some(a), Some(b)) = (parsed.qps, qps) {
                    prop_assert!((a - b).abs() <= 0.0005 + b * 1e-12);
                }
            }
        }
    }
}
