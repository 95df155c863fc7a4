//! `shell`: runs `execution.config.command` with `sh -c`.
//!
//! The command sees `AX_INSTANCE_ID`, `AX_TASK`, `AX_ATTEMPT`, `AX_TRACE_ID` and
//! `AX_PARAMS` (the trigger's params as JSON); a shard also sees `AX_SHARD_INDEX`
//! (0-based), `AX_SHARD_TOTAL` and `AX_FIRING_ID` (the firing's instance id). On
//! timeout or cancellation it gets SIGTERM, then SIGKILL if it has not stopped four
//! seconds later. Exit 0 is success; any other exit
//! fails the attempt with the code and the end of stderr as the reason. Exit codes
//! listed in `execution.config.abort_exit_codes` fail without retry. Every line the
//! command writes to stdout or stderr becomes a task log line (`ax logs <instance>`).

use std::process::Stdio;
use std::sync::Arc;

use ax_domain::log::{LogLevel, LogStream, MAX_MESSAGE_BYTES};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::Command;

use crate::context::{handler_fn, Handler, TaskContext, TaskError};
use crate::logger::TaskLogger;

/// How much of stderr a failure reason keeps.
const STDERR_TAIL: usize = 1024;
/// Between SIGTERM and SIGKILL; inside the worker's stop grace.
const TERM_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

pub fn shell() -> Arc<dyn Handler> {
    handler_fn(run)
}

async fn run(ctx: TaskContext) -> Result<Option<serde_json::Value>, TaskError> {
    let command = ctx
        .config
        .get("command")
        .and_then(|c| c.as_str())
        .ok_or_else(|| TaskError::abort("execution.config.command is missing"))?
        .to_owned();
    let abort_codes: Vec<i64> = ctx
        .config
        .get("abort_exit_codes")
        .and_then(|c| c.as_array())
        .map(|codes| codes.iter().filter_map(|c| c.as_i64()).collect())
        .unwrap_or_default();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&command)
        .env("AX_INSTANCE_ID", ctx.instance_id.as_str())
        .env("AX_TASK", &ctx.task)
        .env("AX_ATTEMPT", ctx.attempt.to_string())
        .env("AX_TRACE_ID", ctx.trace_id.as_str())
        .env("AX_PARAMS", ctx.params.to_string())
        .envs(shard_env(&ctx))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| TaskError::retry(format!("cannot start sh: {err}")))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let forward_stdout = tokio::spawn(forward_lines(stdout, ctx.log.clone(), LogStream::Stdout, LogLevel::Info, 0));
    let collect_stderr = tokio::spawn(forward_lines(stderr, ctx.log.clone(), LogStream::Stderr, LogLevel::Warn, STDERR_TAIL));
    let status = tokio::select! {
        status = child.wait() => status.map_err(|err| TaskError::retry(format!("waiting for sh failed: {err}")))?,
        _ = ctx.cancellation.cancelled() => {
            // SIGTERM first, so the command can clean up; SIGKILL if it will not stop.
            if let Some(pid) = child.id() {
                let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().await;
            }
            match tokio::time::timeout(TERM_GRACE, child.wait()).await {
                Ok(_) => return Err(TaskError::retry("cancelled; the process stopped on SIGTERM")),
                Err(_) => {
                    let _ = child.kill().await;
                    return Err(TaskError::retry(format!("cancelled; the process ignored SIGTERM for {}s and was killed", TERM_GRACE.as_secs())));
                }
            }
        }
    };
    let _ = forward_stdout.await;
    let stderr = collect_stderr.await.unwrap_or_default();
    if status.success() {
        return Ok(None);
    }
    let tail = String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(STDERR_TAIL)..]).trim().to_owned();
    let code = status.code();
    let mut reason = match code {
        Some(code) => format!("exit code {code}"),
        None => "killed by a signal".to_owned(),
    };
    if !tail.is_empty() {
        reason.push_str(": ");
        reason.push_str(&tail);
    }
    match code {
        Some(code) if abort_codes.contains(&i64::from(code)) => Err(TaskError::Abort { reason }),
        _ => Err(TaskError::Retry { reason }),
    }
}

/// Sends each line of `pipe` to the task log and returns the last `keep` bytes
/// (the end of stderr makes a failure's reason). A line longer than a log message
/// is cut into several.
async fn forward_lines(pipe: impl AsyncRead + Unpin, log: TaskLogger, stream: LogStream, level: LogLevel, keep: usize) -> Vec<u8> {
    let mut reader = BufReader::new(pipe);
    let mut tail: Vec<u8> = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_MESSAGE_BYTES as u64).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if keep > 0 {
            tail.extend_from_slice(&line);
            if tail.len() > keep * 2 {
                tail.drain(..tail.len() - keep);
            }
        }
        let text = String::from_utf8_lossy(&line);
        log.emit(level, stream, text.trim_end_matches(['\n', '\r']).to_owned());
    }
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    tail
}
/// The shard variables of a sharded or broadcast firing's shard; none otherwise.
fn shard_env(ctx: &TaskContext) -> Vec<(&'static str, String)> {
    match &ctx.shard {
        Some(shard) => vec![
            ("AX_SHARD_INDEX", shard.index.to_string()),
            ("AX_SHARD_TOTAL", shard.total.to_string()),
            ("AX_FIRING_ID", shard.parent_id.to_string()),
        ],
        None => Vec::new(),
    }
}
