//! The figures a run produces, the table they print as, and the JSON file they are
//! saved in. A figure with a target from issue 6 says whether it met it and, if not,
//! by how much, so a missed target is never hidden.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

/// What a figure is measured in; decides how it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    PerSec,
    Ms,
    Seconds,
    Mb,
    Count,
    Percent,
    Ratio,
    /// A plain number with two decimals (per-instance averages).
    Decimal,
}

impl Unit {
    fn suffix(self) -> &'static str {
        match self {
            Unit::PerSec => "/s",
            Unit::Ms => "ms",
            Unit::Seconds => "s",
            Unit::Mb => "MB",
            Unit::Count => "",
            Unit::Percent => "%",
            Unit::Ratio => "×",
            Unit::Decimal => "",
        }
    }

    /// `value` with thousands separators and the precision the unit deserves.
    pub fn format(self, value: f64) -> String {
        let number = match self {
            Unit::PerSec | Unit::Count => group_thousands(value.round() as i64),
            Unit::Ms if value.abs() < 100.0 => format!("{value:.1}"),
            Unit::Ms => group_thousands(value.round() as i64),
            Unit::Seconds | Unit::Mb | Unit::Percent => format!("{value:.1}"),
            Unit::Ratio | Unit::Decimal => format!("{value:.2}"),
        };
        match self.suffix() {
            "" => number,
            suffix if matches!(self, Unit::Percent | Unit::Ratio) => format!("{number}{suffix}"),
            suffix => format!("{number} {suffix}"),
        }
    }
}

fn group_thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A bar from issue 6.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Target {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    pub fn met_by(self, value: f64) -> bool {
        match self {
            Target::AtLeast(t) => value >= t,
            Target::AtMost(t) => value <= t,
        }
    }

    fn describe(self, unit: Unit) -> String {
        match self {
            Target::AtLeast(t) => format!("≥ {}", unit.format(t)),
            Target::AtMost(t) => format!("≤ {}", unit.format(t)),
        }
    }

    /// How far `value` is from the bar, in words.
    fn shortfall(self, value: f64) -> String {
        match self {
            Target::AtLeast(t) if t > 0.0 => format!("{:.0}% of target", value / t * 100.0),
            Target::AtMost(t) if t > 0.0 => format!("{:.1}× the limit", value / t),
            Target::AtLeast(_) | Target::AtMost(_) => "over the limit".to_owned(),
        }
    }
}

/// One number of one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub scenario: &'static str,
    pub name: String,
    /// `None` when the thing never happened (e.g. the last instance never finished).
    pub value: Option<f64>,
    pub unit: Unit,
    pub target: Option<Target>,
    /// `None` without a target.
    pub met: Option<bool>,
    /// What the number includes, or why it is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Figure {
    pub fn new(scenario: &'static str, name: impl Into<String>, value: Option<f64>, unit: Unit) -> Self {
        Self { scenario, name: name.into(), value, unit, target: None, met: None, note: None }
    }

    pub fn target(mut self, target: Target) -> Self {
        self.target = Some(target);
        self.met = Some(self.value.is_some_and(|v| target.met_by(v)));
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    fn value_text(&self) -> String {
        match self.value {
            Some(v) => self.unit.format(v),
            None => "n/a".to_owned(),
        }
    }

    fn target_text(&self) -> String {
        self.target.map(|t| t.describe(self.unit)).unwrap_or_default()
    }

    fn status_text(&self) -> String {
        match (self.target, self.value) {
            (None, _) => String::new(),
            (Some(_), None) => "MISSED (never happened)".to_owned(),
            (Some(t), Some(v)) if t.met_by(v) => "met".to_owned(),
            (Some(t), Some(v)) => format!("MISSED: {}", t.shortfall(v)),
        }
    }
}

/// Everything a run found: the figures, machine facts, and per-scenario details
/// (CPU split, batch sizes, counters) that explain the figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub meta: BTreeMap<String, serde_json::Value>,
    pub figures: Vec<Figure>,
    pub details: BTreeMap<String, serde_json::Value>,
}

impl Report {
    pub fn push(&mut self, figure: Figure) {
        self.figures.push(figure);
    }

    /// p50, p99 (judged by `p99_target`, if any) and max of one measure, in ms.
    pub fn push_summary(&mut self, scenario: &'static str, what: &str, summary: Option<crate::stats::Summary>, p99_target: Option<Target>) {
        self.push(Figure::new(scenario, format!("{what} p50"), summary.map(|s| s.p50), Unit::Ms));
        let mut p99 = Figure::new(scenario, format!("{what} p99"), summary.map(|s| s.p99), Unit::Ms);
        if let Some(target) = p99_target {
            p99 = p99.target(target);
        }
        self.push(p99);
        self.push(Figure::new(scenario, format!("{what} max"), summary.map(|s| s.max), Unit::Ms));
    }

    pub fn detail(&mut self, key: impl Into<String>, value: serde_json::Value) {
        self.details.insert(key.into(), value);
    }

    fn rows(&self) -> Vec<[String; 5]> {
        self.figures
            .iter()
            .map(|f| [f.scenario.to_owned(), f.name.clone(), f.value_text(), f.target_text(), f.status_text()])
            .collect()
    }

    /// The plain-text table printed at the end of a run.
    pub fn table(&self) -> String {
        let header = ["scenario", "figure", "value", "target", "status"].map(str::to_owned);
        let rows = self.rows();
        let mut widths = header.clone().map(|h| h.chars().count());
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String; 5]| {
            let mut out = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                let pad = w - cell.chars().count();
                if i == 2 {
                    let _ = write!(out, "{}{}  ", " ".repeat(pad), cell); // numbers right-aligned
                } else {
                    let _ = write!(out, "{}{}  ", cell, " ".repeat(pad));
                }
            }
            out.trim_end().to_owned()
        };
        let mut out = line(&header);
        out.push('\n');
        out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 8));
        let mut last_scenario = String::new();
        for row in &rows {
            out.push('\n');
            if row[0] == last_scenario {
                let mut row = row.clone();
                row[0] = String::new();
                out.push_str(&line(&row));
            } else {
                last_scenario = row[0].clone();
                out.push_str(&line(row));
            }
        }
        out.push('\n');
        out
    }

    /// The same table in Markdown, for `bench/README.md`.
    pub fn markdown(&self) -> String {
        let mut out = String::from("| scenario | figure | value | target | status |\n|---|---|--:|---|---|\n");
        for row in self.rows() {
            let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_print_with_separators_and_precision() {
        assert_eq!(Unit::PerSec.format(12345.4), "12,345 /s");
        assert_eq!(Unit::Ms.format(3.04), "3.0 ms");
        assert_eq!(Unit::Ms.format(1234.0), "1,234 ms");
        assert_eq!(Unit::Count.format(-1000.0), "-1,000");
        assert_eq!(Unit::Count.format(999.0), "999");
        assert_eq!(Unit::Ratio.format(0.456), "0.46×");
        assert_eq!(Unit::Mb.format(150.04), "150.0 MB");
        assert_eq!(Unit::Decimal.format(4.0), "4.00");
    }

    #[test]
    fn a_missed_target_says_by_how_much() {
        let f = Figure::new("throughput", "end to end", Some(1000.0), Unit::PerSec).target(Target::AtLeast(2500.0));
        assert_eq!(f.met, Some(false));
        assert_eq!(f.status_text(), "MISSED: 40% of target");
        let f = Figure::new("latency", "p99", Some(50.0), Unit::Ms).target(Target::AtMost(25.0));
        assert_eq!(f.status_text(), "MISSED: 2.0× the limit");
        let f = Figure::new("recovery", "lost", Some(0.0), Unit::Count).target(Target::AtMost(0.0));
        assert_eq!((f.met, f.status_text().as_str()), (Some(true), "met"));
        let f = Figure::new("recovery", "lost", Some(3.0), Unit::Count).target(Target::AtMost(0.0));
        assert_eq!(f.status_text(), "MISSED: over the limit");
        let f = Figure::new("recovery", "last done", None, Unit::Seconds).target(Target::AtMost(35.0));
        assert_eq!((f.met, f.status_text().as_str()), (Some(false), "MISSED (never happened)"));
    }

    #[test]
    fn the_table_aligns_and_groups_by_scenario() {
        let mut report = Report::default();
        report.push(Figure::new("throughput", "end to end", Some(2600.0), Unit::PerSec).target(Target::AtLeast(2500.0)));
        report.push(Figure::new("throughput", "events published", Some(10400.0), Unit::PerSec));
        report.push(Figure::new("ceilings", "commits", Some(7400.0), Unit::PerSec));
        let table = report.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].starts_with("scenario"));
        assert!(lines[2].starts_with("throughput") && lines[2].ends_with("met"));
        assert!(lines[3].starts_with("          "), "a repeated scenario is blank: {:?}", lines[3]);
        assert!(lines[3].contains("10,400 /s"));
        let md = report.markdown();
        assert!(md.contains("| throughput | end to end | 2,600 /s | ≥ 2,500 /s | met |"));
    }

    #[test]
    fn figures_serialize_with_their_target_and_verdict() {
        let f = Figure::new("delay", "start − due p99", Some(30.0), Unit::Ms).target(Target::AtMost(20.0)).note("MySQL timestamps");
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["met"], false);
        assert_eq!(json["target"]["kind"], "at_most");
        assert_eq!(json["target"]["value"], 20.0);
        assert_eq!(json["unit"], "ms");
        assert_eq!(json["note"], "MySQL timestamps");
    }
}
