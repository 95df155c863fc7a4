//! Batch statements come in a few sizes only.
//!
//! sqlx prepares every statement and keeps it in a per-connection cache. A batch
//! statement whose text changes with its row count (an `IN` list, a multi-row
//! `INSERT`) makes a new statement for nearly every batch; once the cache is full,
//! sqlx closes the least recently used one with `COM_STMT_CLOSE`, a packet the
//! server never answers. The next command is then written while that close is not
//! yet acknowledged, so Nagle's algorithm holds it until the server's delayed ACK,
//! 40 ms later. The hot path paid that on most commits (114 instances/s end to end
//! in the benchmark; 865/s with delayed ACKs switched off on loopback, which is how
//! it was found).
//!
//! So every variable list is sent in a power-of-two size: an `IN` list is padded by
//! repeating its last element (harmless to a membership test), and multi-row
//! `INSERT`s go in power-of-two pieces (13 rows: 8, 4 and 1). With sizes up to
//! 1,024 that is 11 shapes per statement, well inside the cache.

/// The length a list of `n` items is sent with.
pub(crate) fn padded_len(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// `items`, then its last item repeated up to [`padded_len`]; nothing for an empty slice.
pub(crate) fn padded<T>(items: &[T]) -> impl Iterator<Item = &T> {
    let extra = if items.is_empty() { 0 } else { padded_len(items.len()) - items.len() };
    items.iter().chain(items.last().into_iter().cycle().take(extra))
}

/// The largest piece a multi-row `INSERT` is sent in.
const MAX_PIECE: usize = 512;

/// `items` cut into power-of-two pieces, largest first.
pub(crate) fn pieces<T>(items: &[T]) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut rest = items;
    while !rest.is_empty() {
        let size = (1usize << (usize::BITS - 1 - rest.len().leading_zeros())).min(MAX_PIECE);
        let (piece, tail) = rest.split_at(size);
        out.push(piece);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_pad_to_a_power_of_two_with_the_last_item() {
        assert_eq!(padded(&[1, 2, 3]).copied().collect::<Vec<_>>(), [1, 2, 3, 3]);
        assert_eq!(padded(&[7]).copied().collect::<Vec<_>>(), [7]);
        assert_eq!(padded::<u8>(&[]).count(), 0);
        assert_eq!(padded(&[0; 9]).count(), 16);
    }

    #[test]
    fn inserts_go_in_power_of_two_pieces() {
        let items: Vec<u32> = (0..13).collect();
        let sizes: Vec<usize> = pieces(&items).iter().map(|p| p.len()).collect();
        assert_eq!(sizes, [8, 4, 1]);
        let big: Vec<u32> = (0..1500).collect();
        let sizes: Vec<usize> = pieces(&big).iter().map(|p| p.len()).collect();
        assert_eq!(sizes, [512, 512, 256, 128, 64, 16, 8, 4]);
        assert_eq!(sizes.iter().sum::<usize>(), 1500);
        assert!(pieces::<u8>(&[]).is_empty());
    }
}
