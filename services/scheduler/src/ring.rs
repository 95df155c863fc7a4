//! The consistent-hash ring of `dispatch.strategy: hash` (seed 4.4): a task keeps
//! going to the same worker, and a worker joining or leaving moves only its own
//! share of tasks (about 1/N), not all of them.

/// Points per worker: enough that shares are even with a handful of workers.
const VIRTUAL_NODES: u32 = 64;

/// FNV-1a, 64 bits: stable across processes and versions, unlike `std`'s hasher.
fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // FNV mixes the last bytes weakly; a final avalanche spreads nearby keys.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The workers in the order the ring offers them for `key`: the owner first, then
/// the next distinct workers clockwise (fallbacks when the owner is full).
pub fn candidates<'a>(workers: &[&'a str], key: &str) -> Vec<&'a str> {
    let mut points: Vec<(u64, &'a str)> = workers
        .iter()
        .flat_map(|w| (0..VIRTUAL_NODES).map(move |i| (hash(format!("{w}#{i}").as_bytes()), *w)))
        .collect();
    points.sort_unstable();
    let start = points.partition_point(|(p, _)| *p < hash(key.as_bytes()));
    let mut order: Vec<&'a str> = Vec::with_capacity(workers.len());
    for (_, worker) in points[start..].iter().chain(&points[..start]) {
        if !order.contains(worker) {
            order.push(worker);
            if order.len() == workers.len() {
                break;
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joining_worker_takes_about_its_share_and_nothing_else_moves() {
        let before = ["w1", "w2", "w3", "w4"];
        let after = ["w1", "w2", "w3", "w4", "w5"];
        let keys: Vec<String> = (0..2000).map(|i| format!("task_{i}")).collect();
        let mut moved = 0;
        for key in &keys {
            let a = candidates(&before, key)[0];
            let b = candidates(&after, key)[0];
            if a != b {
                assert_eq!(b, "w5", "{key} moved between old workers");
                moved += 1;
            }
        }
        let share = moved as f64 / keys.len() as f64;
        println!("a fifth worker took {:.1} % of 2000 tasks (ideal 20 %)", share * 100.0);
        assert!((0.12..0.28).contains(&share), "moved {share}");
    }

    #[test]
    fn the_same_task_keeps_its_worker_and_fallbacks_are_distinct() {
        let workers = ["a", "b", "c"];
        let first = candidates(&workers, "report");
        assert_eq!(first, candidates(&workers, "report"));
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, ["a", "b", "c"]);
    }
}
