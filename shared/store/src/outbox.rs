//! The outbox: events committed with their cause, waiting for JetStream's ack.
//!
//! A committing transaction writes its events as one row of `outbox_batches`, in
//! the order they happened: one insert however many transitions the batch moved,
//! and one row for the relay to read and delete. Each event is six netstrings
//! (`<byte length>:<bytes>,`): event id, subject, task name, instance id, state
//! (empty when the event has none) and the encoded event. Netstrings because the
//! migration that moved the old one-row-per-event table over could write them in
//! plain SQL.

use ax_domain::Timestamp;
use sqlx::{FromRow, MySqlConnection};

use crate::error::{Context, StoreError};
use crate::Store;

/// One event waiting to be published.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEvent {
    pub event_id: String,
    pub subject: String,
    pub task_name: String,
    pub instance_id: Option<String>,
    pub state: Option<String>,
    pub payload: Vec<u8>,
}

/// The events one transaction committed, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxBatch {
    pub id: u64,
    pub created_at: Timestamp,
    pub events: Vec<OutboxEvent>,
}

/// A batch row whose body does not decode. Only AX writes the outbox, so this means
/// a damaged row; the relay reports and drops it rather than stall behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct DamagedBatch {
    pub id: u64,
    pub events: u32,
    pub error: String,
}

#[derive(FromRow)]
struct BatchRow {
    id: u64,
    events: u32,
    body: Vec<u8>,
    created_at: Timestamp,
}

impl Store {
    /// The oldest `limit` batches, in commit order per instance; rows that do not
    /// decode come back apart.
    pub async fn outbox_pending(&self, limit: u32) -> Result<(Vec<OutboxBatch>, Vec<DamagedBatch>), StoreError> {
        self.outbox_pending_except(limit, &[]).await
    }

    /// [`Store::outbox_pending`] leaving out `published`: batches a relay published
    /// and has not deleted yet.
    pub async fn outbox_pending_except(&self, limit: u32, published: &[u64]) -> Result<(Vec<OutboxBatch>, Vec<DamagedBatch>), StoreError> {
        let mut query = sqlx::QueryBuilder::new("SELECT id, events, body, created_at FROM outbox_batches");
        if !published.is_empty() {
            query.push(" WHERE id NOT IN (");
            let mut list = query.separated(", ");
            for id in crate::shapes::padded(published) {
                list.push_bind(*id);
            }
            query.push(")");
        }
        query.push(" ORDER BY id LIMIT ").push_bind(limit);
        let mut conn = self.hot().await?;
        let rows: Vec<BatchRow> = query.build_query_as().fetch_all(&mut *conn).await.at("read outbox")?;
        conn.done();
        let mut batches = Vec::with_capacity(rows.len());
        let mut damaged = Vec::new();
        for row in rows {
            match decode(&row.body) {
                Ok(events) => batches.push(OutboxBatch { id: row.id, created_at: row.created_at, events }),
                Err(error) => damaged.push(DamagedBatch { id: row.id, events: row.events, error }),
            }
        }
        Ok((batches, damaged))
    }

    /// Every event still waiting, oldest first (damaged rows left out).
    pub async fn outbox_events(&self) -> Result<Vec<OutboxEvent>, StoreError> {
        let (batches, _) = self.outbox_pending(u32::MAX).await?;
        Ok(batches.into_iter().flat_map(|b| b.events).collect())
    }

    /// Forgets batches whose every event JetStream acknowledged (or that were damaged).
    pub async fn outbox_delete(&self, ids: &[u64]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut query = sqlx::QueryBuilder::new("DELETE FROM outbox_batches WHERE id IN (");
        let mut list = query.separated(", ");
        for id in crate::shapes::padded(ids) {
            list.push_bind(*id);
        }
        query.push(")");
        let mut conn = self.hot().await?;
        query.build().execute(&mut *conn).await.at("delete published outbox rows")?;
        conn.done();
        Ok(())
    }

    /// How many events wait, and the age of the oldest (for the outbox-lag metric).
    pub async fn outbox_lag(&self) -> Result<(u64, Option<Timestamp>), StoreError> {
        // SUM is DECIMAL in both dialects; the cast keeps it an integer.
        let (count, oldest): (i64, Option<Timestamp>) =
            sqlx::query_as("SELECT CAST(COALESCE(SUM(events), 0) AS SIGNED), MIN(created_at) FROM outbox_batches")
                .fetch_one(&self.pool)
                .await
                .at("measure outbox")?;
        Ok((count.max(0) as u64, oldest))
    }
}

/// Writes `events` as one outbox row inside the caller's transaction.
pub(crate) async fn append(conn: &mut MySqlConnection, events: &[OutboxEvent], now: Timestamp) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    sqlx::query("INSERT INTO outbox_batches (events, body, created_at) VALUES (?, ?, ?)")
        .bind(events.len() as u32)
        .bind(encode(events))
        .bind(now)
        .execute(conn)
        .await
        .at("append outbox events")?;
    Ok(())
}

fn encode(events: &[OutboxEvent]) -> Vec<u8> {
    let size: usize = events.iter().map(|e| e.payload.len() + e.subject.len() + 128).sum();
    let mut out = Vec::with_capacity(size);
    for e in events {
        for field in [
            e.event_id.as_bytes(),
            e.subject.as_bytes(),
            e.task_name.as_bytes(),
            e.instance_id.as_deref().unwrap_or("").as_bytes(),
            e.state.as_deref().unwrap_or("").as_bytes(),
            &e.payload,
        ] {
            out.extend_from_slice(field.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(field);
            out.push(b',');
        }
    }
    out
}

fn decode(mut body: &[u8]) -> Result<Vec<OutboxEvent>, String> {
    let mut events = Vec::new();
    while !body.is_empty() {
        let mut fields: [&[u8]; 6] = [&[]; 6];
        for (i, field) in fields.iter_mut().enumerate() {
            let (value, rest) = netstring(body).map_err(|e| format!("event {}, field {}: {e}", events.len() + 1, i + 1))?;
            *field = value;
            body = rest;
        }
        let text = |i: usize| String::from_utf8(fields[i].to_vec()).map_err(|_| format!("event {}, field {}: not UTF-8", events.len() + 1, i + 1));
        let optional = |i: usize| text(i).map(|s| (!s.is_empty()).then_some(s));
        events.push(OutboxEvent {
            event_id: text(0)?,
            subject: text(1)?,
            task_name: text(2)?,
            instance_id: optional(3)?,
            state: optional(4)?,
            payload: fields[5].to_vec(),
        });
    }
    Ok(events)
}

/// Splits one `<length>:<bytes>,` off the front of `input`.
fn netstring(input: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let colon = input.iter().take(20).position(|&b| b == b':').ok_or("no length prefix")?;
    let digits = &input[..colon];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err("length prefix is not a number".into());
    }
    let len: usize = std::str::from_utf8(digits).ok().and_then(|s| s.parse().ok()).ok_or("length prefix out of range")?;
    let start = colon + 1;
    let end = start.checked_add(len).filter(|&end| end < input.len()).ok_or("shorter than its length prefix")?;
    if input[end] != b',' {
        return Err("missing the closing comma".into());
    }
    Ok((&input[start..end], &input[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: usize, instance: bool) -> OutboxEvent {
        OutboxEvent {
            event_id: format!("ev{i}"),
            subject: format!("ax.event.instance.t{i}.created"),
            task_name: format!("t{i}"),
            instance_id: instance.then(|| format!("in{i}")),
            state: instance.then(|| "CREATED".to_owned()),
            // Binary, with the separators inside, as CBOR may have.
            payload: vec![0, b':', b',', 255, i as u8, b'9'],
        }
    }

    #[test]
    fn a_batch_decodes_to_the_events_it_was_made_of_in_order() {
        let events: Vec<OutboxEvent> = (0..5).map(|i| event(i, i % 2 == 0)).collect();
        assert_eq!(decode(&encode(&events)).unwrap(), events);
        assert_eq!(decode(b"").unwrap(), Vec::new());
    }

    #[test]
    fn the_migration_layout_of_a_task_event_decodes() {
        // What the migration's CONCAT writes for an old row without an instance.
        let body = b"2:e1,26:ax.event.task.t.registered,1:t,0:,0:,3:\x01\x02\x03,";
        let events = decode(body).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].subject, "ax.event.task.t.registered");
        assert_eq!(events[0].instance_id, None);
        assert_eq!(events[0].payload, [1, 2, 3]);
    }

    #[test]
    fn damaged_bodies_are_refused_with_where_and_why() {
        let whole = encode(&[event(1, true)]);
        let cut = &whole[..whole.len() - 3];
        assert!(decode(cut).unwrap_err().contains("field 6: shorter than its length prefix"));
        assert!(decode(b"x:ab,").unwrap_err().contains("not a number"));
        assert!(decode(b"2:ab;").unwrap_err().contains("closing comma"));
        assert!(decode(b"99999999999999999999999:").is_err());
        assert!(decode(b"2:e1,").unwrap_err().contains("event 1, field 2"));
    }
}
