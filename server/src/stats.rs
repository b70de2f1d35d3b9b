//! Counters, served as JSON at `GET /_hipobj/stats` (tests count requests with them): one flat
//! object of numbers, plus `devices`, one object of [`DeviceCounters`] per RDMA device the server
//! serves from, by name (`"devices":{"rxe1":{"jobs":3,...},...}`; absent with RDMA off).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Monotonic counters (plus `pairings_live`, a gauge).
        #[derive(Default, Debug)]
        pub struct Stats {
            $($(#[$doc])* pub $name: AtomicU64,)*
            /// Per-device counters, published once when RDMA starts.
            devices: OnceLock<Vec<(String, Arc<DeviceCounters>)>>,
        }

        impl Stats {
            /// One JSON object: `{"name": value, ..., "devices": {...}}`.
            pub fn to_json(&self) -> String {
                let mut fields: Vec<String> = vec![
                    $(format!("\"{}\":{}", stringify!($name), self.$name.load(Ordering::Relaxed)),)*
                ];
                if let Some(devices) = self.devices.get() {
                    fields.push(format!("\"devices\":{}", devices_json(devices)));
                }
                format!("{{{}}}\n", fields.join(","))
            }
        }
    };
}

counters! {
    /// Plain-HTTP GETs served (body carried the data).
    http_gets,
    /// Plain-HTTP PUTs stored.
    http_puts,
    /// Requests that carried `x-amz-rdma-token` (GET or PUT).
    token_requests,
    /// New pairings (server QPs) created.
    pairings_created,
    /// Pairings replaced because the token's pairing id was 0 or different.
    pairings_replaced,
    /// Pairings destroyed because they sat idle too long.
    pairings_expired,
    /// Pairings evicted because the table was full.
    pairings_evicted,
    /// Pairings destroyed after a failed transfer, or with any other answer that makes the
    /// client replace its QP (500, 507: protocol revision 5). Refusals that start nothing (400,
    /// 403, 404, 409, 412, 416, 501, 503) never count here.
    pairings_failed,
    /// Pairings alive now (a gauge).
    pairings_live,
    /// 428 replies.
    replies_428,
    /// Credentials files read again on SIGHUP and put in use.
    credential_reloads,
    /// SIGHUP reloads refused (the file unreadable, open to group or others, malformed): the
    /// identities in use stayed.
    credential_reload_failures,
    /// RDMA GETs completed (RDMA WRITE to the client).
    rdma_gets,
    /// RDMA PUTs completed (RDMA READ from the client).
    rdma_puts,
    /// RDMA UploadParts completed (RDMA READ from the client, stored as a part).
    rdma_parts,
    /// GETs sent straight from the store's file pages (registered, no copy).
    file_registrations,
    /// File registrations refused: the server's question at start (a page of memory file, before
    /// any transfer; a kernel before 6.2 refuses it), or a GET's. Every GET from then on is sent
    /// through staging buffers.
    file_registrations_refused,
    /// Bytes moved by RDMA WRITE.
    rdma_bytes_written,
    /// Bytes moved by RDMA READ.
    rdma_bytes_read,
    /// Work requests posted.
    work_requests,
    /// Transfers ended with a SEND_WITH_INV of the client's window (docs/protocol.md section 11).
    remote_invalidations,
    /// Completions with an error status.
    completion_errors,
    /// Transfers aborted by the watchdog.
    watchdog_fired,
    /// Measured time per completed RDMA byte, picoseconds (a gauge: the moving average the
    /// watchdog's patience follows).
    completion_ps_per_byte,
    /// Time transfer pollers did not run (host CPUs taken, process stopped), milliseconds: not
    /// counted against the peer.
    poller_stalled_ms,
    /// Transfers aborted by their total deadline (proportional to the size).
    deadline_fired,
    /// Failed transfers whose flushes did not all arrive within the flush wait.
    flush_timeouts,
    /// RDMA jobs that panicked (answered 500, pairing destroyed, worker kept).
    worker_panics,
    /// Transfers failed on purpose by `--inject-rdma-failures` (only a server built with the
    /// cargo feature `fault-injection` has the flag; 0 in the shipped build).
    injected_failures,
    /// Token requests that waited in the queue for a transfer slot.
    transfers_queued,
    /// Token requests refused at once because their pairing key was busy.
    busy_key_rejections,
    /// Replies per code.
    replies_400,
    replies_403,
    replies_404,
    replies_416,
    replies_500,
    replies_501,
    replies_503,
    replies_507,
    replies_408,
    replies_409,
    replies_412,
    replies_413,
    /// hipobj-rc-v2: sessions prepared (PREPARE answered 200).
    v2_prepared,
    /// Sessions whose READY moved their transfer (FINAL 200).
    v2_ready,
    /// Sessions ended by their owner's CANCEL before READY.
    v2_cancelled,
    /// Sessions reclaimed at T_prep (no READY in time).
    v2_expired,
    /// PREPAREs or READYs that failed after the request was accepted (RDMA, data phase).
    v2_failed,
    /// Sessions prepared or moving now.
    v2_sessions_live,
    v2_bytes_written,
    v2_bytes_read,
}

/// What one RDMA device served (`--device a,b`; server/README.md, "Several devices").
#[derive(Default, Debug)]
pub struct DeviceCounters {
    /// Token requests and hipobj-rc-v2 PREPAREs and READYs run on this device.
    pub jobs: AtomicU64,
    /// Of those, the ones that moved bytes (200/206, FINAL 200).
    pub transfers: AtomicU64,
    /// Bytes those moved, either way.
    pub bytes: AtomicU64,
    /// Requests refused with 503 at dispatch because this device faces the client and its port
    /// was not ACTIVE.
    pub port_down_refusals: AtomicU64,
}

impl DeviceCounters {
    fn to_json(&self) -> String {
        let field = |name: &str, c: &AtomicU64| format!("\"{name}\":{}", c.load(Ordering::Relaxed));
        format!(
            "{{{},{},{},{}}}",
            field("jobs", &self.jobs),
            field("transfers", &self.transfers),
            field("bytes", &self.bytes),
            field("port_down_refusals", &self.port_down_refusals),
        )
    }
}

/// `{"name":{...},...}`, names as JSON strings.
fn devices_json(devices: &[(String, Arc<DeviceCounters>)]) -> String {
    let entries: Vec<String> = devices
        .iter()
        .map(|(name, c)| {
            let name = serde_json::Value::from(name.as_str());
            format!("{name}:{}", c.to_json())
        })
        .collect();
    format!("{{{}}}", entries.join(","))
}

impl Stats {
    /// Publish the counters of the devices RDMA serves from, in `--device` order. Only the
    /// first call counts (the server starts RDMA once); false for a later one.
    pub fn publish_devices(&self, devices: Vec<(String, Arc<DeviceCounters>)>) -> bool {
        self.devices.set(devices).is_ok()
    }

    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }

    /// Count a non-success reply code (400, 403, 404, 408, 409, 412, 413, 416, 428, 500, 501,
    /// 503, 507).
    pub fn count_reply(&self, code: u16) {
        let counter = match code {
            400 => &self.replies_400,
            403 => &self.replies_403,
            404 => &self.replies_404,
            408 => &self.replies_408,
            409 => &self.replies_409,
            412 => &self.replies_412,
            413 => &self.replies_413,
            416 => &self.replies_416,
            428 => &self.replies_428,
            500 => &self.replies_500,
            501 => &self.replies_501,
            503 => &self.replies_503,
            507 => &self.replies_507,
            _ => return,
        };
        Stats::bump(counter);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lists_every_counter() {
        let s = Stats::default();
        Stats::bump(&s.replies_428);
        s.count_reply(501);
        let json = s.to_json();
        assert!(json.starts_with('{') && json.trim_end().ends_with('}'));
        assert!(json.contains("\"replies_428\":1"));
        assert!(json.contains("\"replies_501\":1"));
        assert!(json.contains("\"pairings_created\":0"));
        assert!(!json.contains("devices"), "no devices before RDMA starts");
    }

    #[test]
    fn json_breaks_counts_down_by_device() {
        let s = Stats::default();
        let (a, b) = (Arc::default(), Arc::<DeviceCounters>::default());
        assert!(s.publish_devices(vec![
            ("rxe1".into(), Arc::clone(&a)),
            ("rxe3".into(), Arc::clone(&b))
        ]));
        assert!(!s.publish_devices(Vec::new()), "published once");
        Stats::bump(&a.jobs);
        Stats::add(&b.bytes, 4096);
        let json: serde_json::Value = serde_json::from_str(&s.to_json()).expect("valid JSON");
        assert_eq!(json["devices"]["rxe1"]["jobs"], 1);
        assert_eq!(json["devices"]["rxe3"]["bytes"], 4096);
        assert_eq!(json["devices"]["rxe3"]["port_down_refusals"], 0);
        assert_eq!(json["replies_428"], 0);
    }
}
