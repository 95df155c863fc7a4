//! Every NATS subject, stream name and Redis key, built in one place.
//!
//! The subjects are DESIGN.md's contract under the root `ax`. A deployment (or a
//! test) may choose another root, its namespace, so several AX installations can
//! share one NATS and one Redis without seeing each other; stream names then carry
//! the namespace as a suffix.

use crate::event::TaskAction;
use crate::state::StateKind;

pub const DEFAULT_NAMESPACE: &str = "ax";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    root: String,
}

/// Namespaces are subject tokens, Redis key parts and stream-name suffixes at once.
pub fn is_valid_namespace(ns: &str) -> bool {
    (1..=32).contains(&ns.len()) && ns.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl Default for Names {
    fn default() -> Self {
        Self { root: DEFAULT_NAMESPACE.to_owned() }
    }
}

impl Names {
    /// # Panics
    /// On a namespace that [`is_valid_namespace`] refuses; configuration validates first.
    pub fn new(namespace: &str) -> Self {
        assert!(is_valid_namespace(namespace), "invalid namespace {namespace:?}");
        Self { root: namespace.to_owned() }
    }

    pub fn namespace(&self) -> &str {
        &self.root
    }

    // ---- streams ----

    /// `AX_EVENTS` in the default namespace, `AX_EVENTS_<NS>` in another.
    pub fn stream(&self, base: &str) -> String {
        if self.root == DEFAULT_NAMESPACE {
            base.to_owned()
        } else {
            format!("{base}_{}", self.root.to_ascii_uppercase())
        }
    }

    /// Rewrites a subject written for the default namespace (`ax.event.>`, in the
    /// files under `nats/`) into this one.
    pub fn rebase(&self, subject: &str) -> String {
        match subject.strip_prefix("ax.") {
            Some(rest) => format!("{}.{rest}", self.root),
            None => subject.to_owned(),
        }
    }

    // ---- the public contract ----

    pub fn instance_event(&self, task: &str, state: StateKind) -> String {
        format!("{}.event.instance.{task}.{}", self.root, state.token())
    }

    pub fn task_event(&self, task: &str, action: TaskAction) -> String {
        format!("{}.event.task.{task}.{}", self.root, action.token())
    }

    pub fn instance_events_of(&self, task: Option<&str>) -> String {
        format!("{}.event.instance.{}.>", self.root, task.unwrap_or("*"))
    }

    pub fn all_events(&self) -> String {
        format!("{}.event.>", self.root)
    }

    pub fn trigger(&self, task: &str) -> String {
        format!("{}.trigger.{task}", self.root)
    }

    pub fn all_triggers(&self) -> String {
        format!("{}.trigger.*", self.root)
    }

    /// The task name of a trigger subject, if it is one.
    pub fn task_of_trigger<'a>(&self, subject: &'a str) -> Option<&'a str> {
        subject.strip_prefix(self.root.as_str())?.strip_prefix(".trigger.")
    }

    pub fn log(&self, task: &str, instance: &str) -> String {
        format!("{}.log.{task}.{instance}", self.root)
    }

    /// The (task, instance) of a log subject, if it is one.
    pub fn task_and_instance_of_log<'a>(&self, subject: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = subject.strip_prefix(self.root.as_str())?.strip_prefix(".log.")?;
        let (task, instance) = rest.split_once('.')?;
        (!instance.contains('.')).then_some((task, instance))
    }

    /// A report event: `<ns>.event.report.<kind>` (`health`), on `AX_EVENTS`.
    pub fn report_event(&self, kind: &str) -> String {
        format!("{}.event.report.{kind}", self.root)
    }

    // ---- internal RPC between workers and schedulers ----

    pub fn heartbeat(&self) -> String {
        format!("{}.rpc.worker.heartbeat", self.root)
    }

    /// Asks every worker to send a heartbeat now (a scheduler that just started
    /// must not wait a whole heartbeat interval to know the pool).
    pub fn roll_call(&self) -> String {
        format!("{}.rpc.worker.roll_call", self.root)
    }

    pub fn lease_renewal(&self) -> String {
        format!("{}.rpc.worker.lease", self.root)
    }

    pub fn progress(&self) -> String {
        format!("{}.rpc.progress", self.root)
    }

    /// Redis: the execution guard of an instance, and of a task that allows one run.
    pub fn instance_guard(&self, instance: &str) -> String {
        format!("{}:guard:instance:{instance}", self.root)
    }

    pub fn task_guard(&self, task: &str) -> String {
        format!("{}:guard:task:{task}", self.root)
    }

    /// Redis: the recorded result of an instance's side effect `scope` (`ctx.once`).
    pub fn side_effect(&self, instance: &str, scope: &str) -> String {
        format!("{}:once:{instance}:{scope}", self.root)
    }

    /// Redis: present while the current leader's view of Redis is intact; a flush
    /// removes it and tells the leader to rebuild queues from MySQL.
    pub fn redis_sentinel(&self) -> String {
        format!("{}:sentinel", self.root)
    }

    pub fn report(&self) -> String {
        format!("{}.rpc.report", self.root)
    }

    /// Wakes the dispatcher of every scheduler replica when new work is ready.
    pub fn dispatch_kick(&self) -> String {
        format!("{}.rpc.dispatch.kick", self.root)
    }

    // ---- Redis ----

    /// A worker's ready queue.
    pub fn worker_queue(&self, worker: &str) -> String {
        format!("{}:queue:{worker}", self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_subjects_are_the_contract() {
        let n = Names::default();
        assert_eq!(n.instance_event("order_sync", StateKind::Succeeded), "ax.event.instance.order_sync.succeeded");
        assert_eq!(n.task_event("order_sync", TaskAction::Registered), "ax.event.task.order_sync.registered");
        assert_eq!(n.trigger("order_sync"), "ax.trigger.order_sync");
        assert_eq!(n.log("order_sync", "ins_1"), "ax.log.order_sync.ins_1");
        assert_eq!(n.task_and_instance_of_log("ax.log.order_sync.ins_1"), Some(("order_sync", "ins_1")));
        assert_eq!(n.task_and_instance_of_log("ax.log.order_sync"), None);
        assert_eq!(n.report_event("health"), "ax.event.report.health");
        assert_eq!(n.stream("AX_EVENTS"), "AX_EVENTS");
        assert_eq!(n.task_of_trigger("ax.trigger.order_sync"), Some("order_sync"));
    }

    #[test]
    fn other_namespaces_do_not_overlap() {
        let n = Names::new("t42");
        assert_eq!(n.trigger("a"), "t42.trigger.a");
        assert_eq!(n.stream("AX_EVENTS"), "AX_EVENTS_T42");
        assert_eq!(n.rebase("ax.event.>"), "t42.event.>");
        assert_eq!(n.task_of_trigger("ax.trigger.a"), None);
        assert_eq!(n.worker_queue("w1"), "t42:queue:w1");
        assert!(!is_valid_namespace("a.b"));
    }
}
