//! The bodies webhooks expect, from an alert, a health report or a test. Pure.
//!
//! Every notification names the level, the rule, the task and its owner, the
//! instance and its trace id, and links to the instance's logs (seed 5.4: "the
//! alert must carry the task id, the instance id and the log link"). P0 and P1
//! mention the owner where the format can.

use ax_domain::alert::{AlertChannel, AlertLevel, ChannelFormat};
use ax_domain::health::HealthReport;
use ax_store::alerts::{AlertRecord, NotificationKind};
use serde_json::{json, Value};

/// What to say.
pub enum Subject<'a> {
    Alert { kind: NotificationKind, alert: &'a AlertRecord, log_url: Option<String> },
    Report { id: &'a str, report: &'a HealthReport },
    Test { channel: &'a str },
}

/// Fills the log link template: `{instance_id}`, `{task}`, `{trace_id}`.
pub fn log_url(template: &str, alert: &AlertRecord) -> Option<String> {
    let instance = alert.instance_id.as_deref()?;
    Some(
        template
            .replace("{instance_id}", instance)
            .replace("{task}", alert.task.as_deref().unwrap_or(""))
            .replace("{trace_id}", alert.trace_id.as_deref().unwrap_or("")),
    )
}

/// A title and lines of `(label, value)`, shared by every format.
struct Text {
    title: String,
    fields: Vec<(&'static str, String)>,
    link: Option<(String, String)>,
    mention: Option<String>,
}

fn alert_text(kind: NotificationKind, alert: &AlertRecord, log_url: Option<&str>, namespace: &str, mention_owner: bool) -> Text {
    let state = match kind {
        NotificationKind::Resolved => " RECOVERED",
        NotificationKind::Reminder => " STILL FIRING",
        _ => "",
    };
    let mut fields = vec![("summary", alert.summary.clone())];
    if let Some(task) = &alert.task {
        let owner = alert.owner.as_deref().map(|o| format!(" (owner {o})")).unwrap_or_default();
        fields.push(("task", format!("{task}{owner}")));
    }
    if let Some(instance) = &alert.instance_id {
        fields.push(("instance", instance.clone()));
    }
    if let Some(trace) = &alert.trace_id {
        fields.push(("trace", trace.clone()));
    }
    fields.push(("rule", format!("{} ({})", alert.rule, alert.kind)));
    fields.push(("since", format!("{} ({} occurrences)", alert.fired_at.format("%Y-%m-%d %H:%M:%S UTC"), alert.occurrences)));
    if let Some(resolved) = alert.resolved_at {
        fields.push(("resolved", resolved.format("%Y-%m-%d %H:%M:%S UTC").to_string()));
    }
    fields.push(("alert", format!("{} in namespace {namespace}", alert.id)));
    let urgent = matches!(alert.level, AlertLevel::P0 | AlertLevel::P1) && kind != NotificationKind::Resolved;
    Text {
        title: format!("[AX {}{state}] {}", alert.level, alert.summary),
        fields,
        link: log_url.map(|u| ("logs".to_owned(), u.to_owned())),
        mention: alert.owner.clone().filter(|_| mention_owner && urgent),
    }
}

fn report_text(id: &str, report: &HealthReport) -> Text {
    let mut fields = vec![
        ("period", format!("{} → {}", report.since.format("%Y-%m-%d %H:%M"), report.until.format("%Y-%m-%d %H:%M UTC"))),
        ("tasks", format!("{} of {} need attention", report.tasks_flagged, report.tasks_total)),
    ];
    for task in report.tasks.iter().filter(|t| !t.flags.is_empty()).take(20) {
        let flags: Vec<String> = task.flags.iter().map(|f| serde_json::to_value(f).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()).collect();
        fields.push(("flagged", format!("{} (owner {}): {}", task.task, task.owner, flags.join(", "))));
    }
    fields.push(("report", id.to_owned()));
    Text {
        title: format!("[AX] Task health report: {} of {} tasks need attention", report.tasks_flagged, report.tasks_total),
        fields,
        link: None,
        mention: None,
    }
}

impl Text {
    fn plain(&self) -> String {
        let mut out = self.title.clone();
        for (label, value) in &self.fields {
            out.push_str(&format!("\n{label}: {value}"));
        }
        if let Some((label, url)) = &self.link {
            out.push_str(&format!("\n{label}: {url}"));
        }
        out
    }

    fn markdown(&self, mention: Option<&str>) -> String {
        let mut out = format!("### {}\n", self.title);
        for (label, value) in &self.fields {
            out.push_str(&format!("- **{label}**: {value}\n"));
        }
        if let Some((label, url)) = &self.link {
            out.push_str(&format!("- [{label}]({url})\n"));
        }
        if let Some(m) = mention {
            out.push_str(&format!("\n{m}"));
        }
        out
    }

    fn slack(&self) -> String {
        let mut out = format!("*{}*", self.title);
        for (label, value) in &self.fields {
            out.push_str(&format!("\n• *{label}*: {value}"));
        }
        if let Some((label, url)) = &self.link {
            out.push_str(&format!("\n• <{url}|{label}>"));
        }
        if let Some(owner) = &self.mention {
            out.push_str(&format!("\n@{owner}"));
        }
        out
    }
}

fn generic(subject: &Subject<'_>, text: &Text, namespace: &str) -> Value {
    match subject {
        Subject::Alert { kind, alert, log_url } => json!({
            "version": 1,
            "type": "alert",
            "status": kind.as_str(),
            "namespace": namespace,
            "alert_id": alert.id,
            "rule": alert.rule,
            "condition": alert.kind,
            "level": alert.level,
            "task": alert.task,
            "owner": alert.owner,
            "instance_id": alert.instance_id,
            "trace_id": alert.trace_id,
            "summary": alert.summary,
            "details": alert.details,
            "occurrences": alert.occurrences,
            "fired_at": alert.fired_at,
            "resolved_at": alert.resolved_at,
            "acknowledged_at": alert.acknowledged_at,
            "log_url": log_url,
            "title": text.title,
            "text": text.plain(),
        }),
        Subject::Report { id, report } => json!({
            "version": 1,
            "type": "health_report",
            "namespace": namespace,
            "report_id": id,
            "since": report.since,
            "until": report.until,
            "tasks_total": report.tasks_total,
            "tasks_flagged": report.tasks_flagged,
            "flagged": report.tasks.iter().filter(|t| !t.flags.is_empty()).collect::<Vec<_>>(),
            "title": text.title,
            "text": text.plain(),
        }),
        Subject::Test { channel } => json!({
            "version": 1,
            "type": "test",
            "namespace": namespace,
            "channel": channel,
            "title": text.title,
            "text": text.plain(),
        }),
    }
}

/// The body for `channel` (without signatures; sending adds them).
pub fn render(channel: &AlertChannel, subject: &Subject<'_>, namespace: &str) -> Value {
    let text = match subject {
        Subject::Alert { kind, alert, log_url } => alert_text(*kind, alert, log_url.as_deref(), namespace, channel.mention_owner),
        Subject::Report { id, report } => report_text(id, report),
        Subject::Test { channel } => Text {
            title: format!("[AX] Test notification to channel {channel}"),
            fields: vec![("namespace", namespace.to_owned())],
            link: None,
            mention: None,
        },
    };
    match channel.format {
        ChannelFormat::Generic => generic(subject, &text, namespace),
        ChannelFormat::Wecom => {
            let mention = text.mention.as_ref().map(|o| format!("<@{o}>"));
            json!({ "msgtype": "markdown", "markdown": { "content": text.markdown(mention.as_deref()) } })
        }
        ChannelFormat::Dingtalk => {
            let mention = text.mention.as_ref().map(|o| format!("@{o}"));
            let at: Vec<&String> = text.mention.iter().collect();
            json!({
                "msgtype": "markdown",
                "markdown": { "title": text.title, "text": text.markdown(mention.as_deref()) },
                "at": { "atUserIds": at, "isAtAll": false },
            })
        }
        ChannelFormat::Feishu => json!({ "msg_type": "text", "content": { "text": text.plain() } }),
        ChannelFormat::Slack => json!({ "text": text.slack() }),
    }
}

#[cfg(test)]
mod tests {
    use ax_domain::ids::AlertId;
    use ax_store::alerts::AlertStatus;

    use super::*;

    fn alert() -> AlertRecord {
        let now = ax_domain::now();
        AlertRecord {
            id: AlertId::generate(),
            rule: "task-failing".into(),
            kind: "consecutive_failures".into(),
            level: AlertLevel::P1,
            fingerprint: "task-failing:order_sync".into(),
            task: Some("order_sync".into()),
            owner: Some("data_team".into()),
            instance_id: Some("ins_01JDQ6Z8X5C4V9N2M7K3H1G0FF".into()),
            trace_id: Some("trc_01JDQ6Z8X5C4V9N2M7K3H1G0FG".into()),
            status: AlertStatus::Firing,
            summary: "task order_sync failed 3 times in a row: exit code 1".into(),
            details: json!({}),
            occurrences: 1,
            silenced: false,
            fired_at: now,
            last_seen_at: now,
            resolved_at: None,
            notified_at: Some(now),
            acknowledged_at: None,
            acknowledged_by: None,
            ack_comment: None,
        }
    }

    fn channel(format: &str) -> AlertChannel {
        AlertChannel::from_json(format!(r#"{{"name": "c", "format": "{format}", "url": "https://example.com/hook"}}"#).as_bytes()).unwrap()
    }

    #[test]
    fn every_format_names_the_task_the_instance_and_the_log_link() {
        let alert = alert();
        let url = log_url("http://console/instances/{instance_id}/logs?task={task}", &alert);
        assert_eq!(url.as_deref(), Some("http://console/instances/ins_01JDQ6Z8X5C4V9N2M7K3H1G0FF/logs?task=order_sync"));
        let subject = Subject::Alert { kind: NotificationKind::Firing, alert: &alert, log_url: url };
        for format in ["generic", "wecom", "dingtalk", "feishu", "slack"] {
            let body = render(&channel(format), &subject, "ax").to_string();
            for needle in ["order_sync", "ins_01JDQ6Z8X5C4V9N2M7K3H1G0FF", "P1", "http://console/instances/ins_01JDQ6Z8X5C4V9N2M7K3H1G0FF/logs", "data_team"] {
                assert!(body.contains(needle), "{format} lacks {needle}: {body}");
            }
        }
        let generic = render(&channel("generic"), &subject, "ax");
        assert_eq!(generic["status"], "firing");
        assert_eq!(generic["level"], "P1");
        assert_eq!(generic["task"], "order_sync");
        let wecom = render(&channel("wecom"), &subject, "ax");
        assert_eq!(wecom["msgtype"], "markdown");
        assert!(wecom["markdown"]["content"].as_str().unwrap().contains("<@data_team>"));
        let dingtalk = render(&channel("dingtalk"), &subject, "ax");
        assert_eq!(dingtalk["at"]["atUserIds"][0], "data_team");
        let feishu = render(&channel("feishu"), &subject, "ax");
        assert_eq!(feishu["msg_type"], "text");
    }

    #[test]
    fn recoveries_say_so_and_mention_nobody() {
        let mut alert = alert();
        alert.status = AlertStatus::Resolved;
        alert.resolved_at = Some(ax_domain::now());
        let subject = Subject::Alert { kind: NotificationKind::Resolved, alert: &alert, log_url: None };
        let body = render(&channel("wecom"), &subject, "ax");
        let content = body["markdown"]["content"].as_str().unwrap();
        assert!(content.contains("RECOVERED"), "{content}");
        assert!(!content.contains("<@"), "{content}");
        assert_eq!(render(&channel("generic"), &subject, "ax")["status"], "resolved");
    }
}
