//! The JSON Schema of a task definition, kept in `schema/task.schema.json` and served
//! by the api. A test walks a definition with every field set and checks that each of
//! its keys and enumeration values is in the schema, so the two cannot drift apart.

pub const TASK_SCHEMA_JSON: &str = include_str!("../../schema/task.schema.json");

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::task::TaskDefinition;

    /// Every object key of `value` must be a property of `schema` at the same place.
    fn assert_covered(value: &Value, schema: &Value, path: &str) {
        match value {
            Value::Object(map) => {
                if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
                    let kind = map.get("type").and_then(Value::as_str).unwrap();
                    let option = options
                        .iter()
                        .find(|o| o["properties"]["type"]["const"] == kind)
                        .unwrap_or_else(|| panic!("{path}: no schema option for type {kind}"));
                    return assert_covered(value, option, path);
                }
                if schema.get("properties").is_none() {
                    return; // free-form object, e.g. execution.config
                }
                for (key, child) in map {
                    let sub = &schema["properties"][key];
                    assert!(!sub.is_null(), "{path}.{key} is missing from task.schema.json");
                    assert_covered(child, sub, &format!("{path}.{key}"));
                }
            }
            Value::Array(items) => {
                for item in items {
                    assert_covered(item, &schema["items"], &format!("{path}[]"));
                }
            }
            Value::String(s) => {
                if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
                    assert!(allowed.contains(&Value::String(s.clone())), "{path}: {s} is not in the schema's enum");
                }
            }
            _ => {}
        }
    }

    #[test]
    fn the_schema_covers_every_field_of_the_model() {
        let schema: Value = serde_json::from_str(TASK_SCHEMA_JSON).unwrap();
        let full = r#"{
          "task_name": "report", "task_type": "batch", "owner": "bi", "description": "d",
          "triggers": [
            {"type": "cron", "cron": "0 2 * * *", "timezone": "Asia/Shanghai", "misfire": "fire_all", "misfire_limit": 5},
            {"type": "delay", "delay_sec": 30},
            {"type": "chain", "after": "load", "on": "finished"},
            {"type": "event", "source": "nats"}
          ],
          "execution": {"handler": "shell", "config": {"command": "true"}, "timeout": 60,
            "retry": {"max_attempts": 3, "backoff": "linear", "initial_interval_sec": 5, "max_interval_sec": 60, "jitter": 0.1}},
          "concurrency": {"max_running_instances": 1, "blocking_strategy": "replace"},
          "dispatch": {"strategy": "broadcast", "tags": ["a"], "sharding": {"total": 4}},
          "schema_version": 2, "min_worker_version": "1.2.0", "priority": "urgent"
        }"#;
        let definition = TaskDefinition::from_json(full.as_bytes()).unwrap();
        let value = serde_json::to_value(&definition).unwrap();
        assert_covered(&value, &schema, "");
        // Every enumeration spelling of the model appears in the schema too.
        for spelling in ["fixed", "exp", "serial", "discard", "least_running", "hash", "skip", "fire_once", "succeeded", "failed", "any", "http", "low", "normal"] {
            assert!(TASK_SCHEMA_JSON.contains(&format!("\"{spelling}\"")), "{spelling} missing from the schema");
        }
    }
}
