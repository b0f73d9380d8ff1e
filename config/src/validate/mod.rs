//! Stage two: raw TOML → [`Config`]. Defaults live here (and in
//! `deploy/probe.toml`, which a test keeps in step). Every problem is
//! collected with its key path and line; a field with an error gets its
//! default so later cross-checks still run and report their own problems.

mod collector;
mod host;
mod interface;
mod l7;
mod manager;
mod sections;
#[cfg(test)]
mod tests;

use std::ops::Range;
use std::time::Duration;

use crate::duration::parse_duration;
use crate::env::Environment;
use crate::error::{ConfigError, LineIndex, Location, Problem};
use crate::keypath::key_path_at;
use crate::raw::{RawConfig, S};
use crate::settings::Config;

pub use collector::check_collector;
pub use manager::manager_from_text;

/// Parses and validates `text`; on failure returns every error found, in
/// file order. Syntax and shape errors (bad TOML, unknown key, wrong type)
/// stop deserialisation, so at most one of those is reported.
pub fn from_text(text: &str, env: &Environment) -> Result<Config, Vec<ConfigError>> {
    let (raw, mut v) = parse_raw(text, env)?;
    let config = v.config(raw);
    v.finish(config)
}

/// Stage one, and the validator for stage two.
fn parse_raw<'a>(
    text: &'a str,
    env: &'a Environment,
) -> Result<(RawConfig, Validator<'a>), Vec<ConfigError>> {
    if let Err(e) = toml_edit::ImDocument::parse(text) {
        let at = Location::of_offset(text, e.span().map_or(0, |s| s.start));
        return Err(vec![ConfigError::Syntax {
            at,
            message: e.message().trim().to_owned(),
        }]);
    }
    let raw: RawConfig = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let pos = e.span().map_or(0, |s| s.start);
            return Err(vec![ConfigError::Schema {
                key: key_path_at(text, pos).unwrap_or_else(|| "(top level)".to_owned()),
                at: Location::of_offset(text, pos),
                message: plain_serde_message(e.message()),
            }]);
        }
    };
    Ok((
        raw,
        Validator {
            text,
            lines: LineIndex::new(text),
            env,
            errors: Vec::new(),
            not_shown: 0,
        },
    ))
}

/// Problems listed per file; beyond it they are only counted, so a
/// generated file with a million bad entries costs no more than 100 lines
/// of output (and no per-entry line lookups).
pub const MAX_ERRORS: usize = 100;

/// serde names our private types and Rust integer types; say it in TOML terms.
fn plain_serde_message(message: &str) -> String {
    let mut m = message.trim().to_owned();
    if let Some(i) = m.find("expected struct Raw") {
        m.truncate(i);
        m.push_str("expected a table");
    }
    m.replace("expected i64", "expected an integer")
        .replace("expected a sequence", "expected an array")
}

/// Collects errors while building the config.
pub(crate) struct Validator<'a> {
    text: &'a str,
    lines: LineIndex,
    env: &'a Environment,
    errors: Vec<ConfigError>,
    /// Problems found beyond [`MAX_ERRORS`].
    not_shown: usize,
}

/// Inclusive bounds and a name for an integer setting.
#[derive(Clone, Copy)]
pub(crate) struct IntRule {
    pub name: &'static str,
    pub default: i64,
    pub min: i64,
    pub max: i64,
    pub power_of_two: bool,
}

/// Inclusive bounds for a duration setting.
#[derive(Clone, Copy)]
pub(crate) struct DurationRule {
    pub name: &'static str,
    pub default: Duration,
    pub min: Duration,
    pub max: Duration,
}

impl Validator<'_> {
    /// The result: `value`, or every error found, in file order.
    fn finish<T>(mut self, value: T) -> Result<T, Vec<ConfigError>> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            self.errors.sort_by_key(|e| e.location());
            if self.not_shown > 0 {
                self.errors.push(ConfigError::More {
                    more: self.not_shown,
                });
            }
            Err(self.errors)
        }
    }

    pub(crate) fn at(&self, span: Range<usize>) -> Location {
        self.lines.locate(self.text, span.start)
    }

    pub(crate) fn line_of(&self, span: Range<usize>) -> usize {
        self.lines.line(span.start)
    }

    pub(crate) fn invalid(&mut self, key: impl Into<String>, span: Range<usize>, problem: Problem) {
        if self.errors.len() >= MAX_ERRORS {
            self.not_shown += 1;
            return;
        }
        let at = self.at(span);
        self.errors.push(ConfigError::Invalid {
            key: key.into(),
            at,
            problem,
        });
    }

    /// An error with no value to point at (a missing section): line 1.
    pub(crate) fn invalid_at_top(&mut self, key: impl Into<String>, problem: Problem) {
        self.invalid(key, 0..0, problem);
    }

    pub(crate) fn online_cores(&self) -> Option<&[usize]> {
        self.env.online_cores.as_deref()
    }

    /// Integer with default and range (and optionally power-of-two) checks.
    pub(crate) fn int(&mut self, key: &str, value: Option<&S<i64>>, rule: IntRule) -> i64 {
        let Some(v) = value else {
            return rule.default;
        };
        let n = *v.get_ref();
        if rule.power_of_two && (n <= 0 || n.count_ones() != 1) {
            self.invalid(
                key,
                v.span(),
                Problem::NotPowerOfTwo {
                    name: rule.name,
                    value: n,
                },
            );
            return rule.default;
        }
        if n == 0 && rule.min == 1 {
            self.invalid(key, v.span(), Problem::Zero { name: rule.name });
            return rule.default;
        }
        if n < rule.min || n > rule.max {
            self.invalid(
                key,
                v.span(),
                Problem::OutOfRange {
                    name: rule.name,
                    value: n,
                    min: rule.min,
                    max: rule.max,
                },
            );
            return rule.default;
        }
        n
    }

    /// Duration string with a unit, with default and range checks.
    pub(crate) fn duration(
        &mut self,
        key: &str,
        value: Option<&S<toml::Value>>,
        rule: DurationRule,
    ) -> Duration {
        let Some(v) = value else {
            return rule.default;
        };
        let parsed = match v.get_ref() {
            toml::Value::String(s) => parse_duration(s).map_err(Problem::from),
            toml::Value::Integer(n) => Err(Problem::DurationType(format!(
                "integer {n} (write \"{n}s\" or \"{n}ms\")"
            ))),
            other => Err(Problem::DurationType(other.type_str().to_owned())),
        };
        let d = match parsed {
            Ok(d) => d,
            Err(p) => {
                self.invalid(key, v.span(), p);
                return rule.default;
            }
        };
        if d.is_zero() && !rule.min.is_zero() {
            self.invalid(key, v.span(), Problem::Zero { name: rule.name });
            return rule.default;
        }
        if d < rule.min || d > rule.max {
            let range = format!(
                "{} must be between {} and {} (got {})",
                rule.name,
                crate::format_duration(rule.min),
                crate::format_duration(rule.max),
                crate::format_duration(d)
            );
            self.invalid(key, v.span(), Problem::Inconsistent(range));
            return rule.default;
        }
        d
    }

    /// One of a fixed set of words.
    pub(crate) fn choice<T: Copy>(
        &mut self,
        key: &str,
        value: Option<&S<String>>,
        default: T,
        table: &[(&'static str, T)],
        allowed: &'static [&'static str],
    ) -> T {
        let Some(v) = value else {
            return default;
        };
        match table.iter().find(|(word, _)| *word == v.get_ref().as_str()) {
            Some((_, t)) => *t,
            None => {
                self.invalid(
                    key,
                    v.span(),
                    Problem::NotOneOf {
                        value: v.get_ref().clone(),
                        allowed,
                    },
                );
                default
            }
        }
    }

    fn config(&mut self, raw: RawConfig) -> Config {
        let probe = self.probe(raw.probe.unwrap_or_default());
        let host = self.host(raw.host.unwrap_or_default());
        // A host agent may watch its own kernel without capturing a port.
        let interfaces = if raw.interface.is_empty() && host.any() {
            Vec::new()
        } else {
            self.interfaces(&raw.interface)
        };
        let flow = self.flow(raw.flow.unwrap_or_default());
        let l7 = self.l7(raw.l7.unwrap_or_default());
        let filter = self.filter(raw.filter.unwrap_or_default());
        let export = self.export(raw.export.unwrap_or_default());
        let metrics = self.metrics(raw.metrics.unwrap_or_default());
        let manager = raw.manager.map(|m| self.manager(m.into_inner()));
        Config {
            probe,
            interfaces,
            flow,
            l7,
            filter,
            export,
            metrics,
            host,
            manager,
        }
    }
}
