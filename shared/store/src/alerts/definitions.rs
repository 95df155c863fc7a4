//! Rules and channels: small sets of named JSON definitions, replaced whole.

use ax_domain::alert::{AlertChannel, AlertRule};
use ax_domain::Timestamp;
use sqlx::FromRow;

use crate::error::{retry_busy, Context, StoreError};
use crate::Store;

/// A definition with when it was made and last changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored<T> {
    pub definition: T,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    Created,
    Updated,
    Unchanged,
}

#[derive(FromRow)]
struct DefinitionRow {
    name: String,
    definition: String,
    created_at: Timestamp,
    updated_at: Timestamp,
}

/// The SQL of one definitions table.
struct Table {
    what: &'static str,
    list: &'static str,
    get: &'static str,
    lock: &'static str,
    insert: &'static str,
    update: &'static str,
    delete: &'static str,
}

const RULES: Table = Table {
    what: "alert_rules",
    list: include_str!("../../queries/alerts/rule_list.sql"),
    get: include_str!("../../queries/alerts/rule_get.sql"),
    lock: include_str!("../../queries/alerts/rule_lock.sql"),
    insert: include_str!("../../queries/alerts/rule_insert.sql"),
    update: include_str!("../../queries/alerts/rule_update.sql"),
    delete: include_str!("../../queries/alerts/rule_delete.sql"),
};

const CHANNELS: Table = Table {
    what: "alert_channels",
    list: include_str!("../../queries/alerts/channel_list.sql"),
    get: include_str!("../../queries/alerts/channel_get.sql"),
    lock: include_str!("../../queries/alerts/channel_lock.sql"),
    insert: include_str!("../../queries/alerts/channel_insert.sql"),
    update: include_str!("../../queries/alerts/channel_update.sql"),
    delete: include_str!("../../queries/alerts/channel_delete.sql"),
};

fn decode<T>(table: &Table, row: DefinitionRow, parse: fn(&[u8]) -> Result<T, ax_domain::task::FieldError>) -> Result<Stored<T>, StoreError> {
    let definition = parse(row.definition.as_bytes())
        .map_err(|e| StoreError::Corrupt { what: table.what, reason: format!("{}: {e}", row.name) })?;
    Ok(Stored { definition, created_at: row.created_at, updated_at: row.updated_at })
}

impl Store {
    async fn list_definitions<T>(&self, table: &Table, parse: fn(&[u8]) -> Result<T, ax_domain::task::FieldError>) -> Result<Vec<Stored<T>>, StoreError> {
        let rows: Vec<DefinitionRow> = sqlx::query_as(table.list).fetch_all(&self.pool).await.at("list definitions")?;
        rows.into_iter().map(|row| decode(table, row, parse)).collect()
    }

    async fn get_definition<T>(
        &self,
        table: &Table,
        name: &str,
        parse: fn(&[u8]) -> Result<T, ax_domain::task::FieldError>,
    ) -> Result<Option<Stored<T>>, StoreError> {
        let row: Option<DefinitionRow> = sqlx::query_as(table.get).bind(name).fetch_optional(&self.pool).await.at("get definition")?;
        row.map(|row| decode(table, row, parse)).transpose()
    }

    /// Inserts or replaces under the row's lock, so concurrent puts serialize.
    async fn put_definition(&self, table: &Table, name: &str, json: &str) -> Result<Put, StoreError> {
        retry_busy(|| async {
            let now = ax_domain::now();
            let mut tx = self.pool.begin().await.at("begin put definition")?;
            let current: Option<DefinitionRow> = sqlx::query_as(table.lock).bind(name).fetch_optional(&mut *tx).await.at("lock definition")?;
            let put = match current {
                None => {
                    sqlx::query(table.insert).bind(name).bind(json).bind(now).bind(now).execute(&mut *tx).await.at("insert definition")?;
                    Put::Created
                }
                Some(row) if row.definition == json => Put::Unchanged,
                Some(_) => {
                    sqlx::query(table.update).bind(json).bind(now).bind(name).execute(&mut *tx).await.at("update definition")?;
                    Put::Updated
                }
            };
            tx.commit().await.at("commit put definition")?;
            Ok(put)
        })
        .await
    }

    async fn delete_definition(&self, table: &Table, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(table.delete).bind(name).execute(&self.pool).await.at("delete definition")?;
        Ok(done.rows_affected() > 0)
    }

    pub async fn alert_rules(&self) -> Result<Vec<Stored<AlertRule>>, StoreError> {
        self.list_definitions(&RULES, AlertRule::from_json).await
    }

    pub async fn alert_rule(&self, name: &str) -> Result<Option<Stored<AlertRule>>, StoreError> {
        self.get_definition(&RULES, name, AlertRule::from_json).await
    }

    pub async fn put_alert_rule(&self, rule: &AlertRule) -> Result<Put, StoreError> {
        self.put_definition(&RULES, &rule.name, &rule.to_json()).await
    }

    pub async fn delete_alert_rule(&self, name: &str) -> Result<bool, StoreError> {
        self.delete_definition(&RULES, name).await
    }

    pub async fn alert_channels(&self) -> Result<Vec<Stored<AlertChannel>>, StoreError> {
        self.list_definitions(&CHANNELS, AlertChannel::from_json).await
    }

    pub async fn alert_channel(&self, name: &str) -> Result<Option<Stored<AlertChannel>>, StoreError> {
        self.get_definition(&CHANNELS, name, AlertChannel::from_json).await
    }

    pub async fn put_alert_channel(&self, channel: &AlertChannel) -> Result<Put, StoreError> {
        self.put_definition(&CHANNELS, &channel.name, &channel.to_json()).await
    }

    pub async fn delete_alert_channel(&self, name: &str) -> Result<bool, StoreError> {
        self.delete_definition(&CHANNELS, name).await
    }
}
