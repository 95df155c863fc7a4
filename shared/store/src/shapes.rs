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
//! So every variable list is sent in a few sizes: an `IN` list (and the batch
//! `UPDATE`, whose `CASE` and `IN` tolerate a repeated row) is padded to a power of
//! two by repeating its last element, and a multi-row `INSERT` goes whole up to 16
//! rows, else in power-of-two pieces (45 rows: 32 and 13). That is at most 11 shapes
//! per padded statement and 22 per insert, inside the cache.

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

/// Up to this many rows, a multi-row `INSERT` goes whole: small batches are the
/// common case, and cutting them would cost a statement each piece.
const WHOLE_UP_TO: usize = 16;

/// `items` cut into pieces: whole up to 16 rows, else power-of-two pieces, largest
/// first, down to a last piece of at most 16.
pub(crate) fn pieces<T>(items: &[T]) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut rest = items;
    while !rest.is_empty() {
        let size = if rest.len() <= WHOLE_UP_TO {
            rest.len()
        } else {
            (1usize << (usize::BITS - 1 - rest.len().leading_zeros())).min(MAX_PIECE)
        };
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
        assert_eq!(sizes, [13]);
        let items: Vec<u32> = (0..45).collect();
        let sizes: Vec<usize> = pieces(&items).iter().map(|p| p.len()).collect();
        assert_eq!(sizes, [32, 13]);
        let big: Vec<u32> = (0..1500).collect();
        let sizes: Vec<usize> = pieces(&big).iter().map(|p| p.len()).collect();
        assert_eq!(sizes, [512, 512, 256, 128, 64, 16, 12]);
        assert_eq!(sizes.iter().sum::<usize>(), 1500);
        assert!(pieces::<u8>(&[]).is_empty());
    }
}
