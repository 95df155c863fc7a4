//! Cutting a sorted batch into transactions of about a given size without
//! splitting a group: a schedule's (or a task's) fires must stay in one piece, in
//! order, since fire n + 1 is taken only once n has moved the schedule.

/// `sorted` in pieces of at least `size` items (the last may be smaller), cut only
/// between two items that `same_group` tells apart.
pub(crate) fn keeping_groups<T>(sorted: Vec<T>, size: usize, same_group: impl Fn(&T, &T) -> bool) -> Vec<Vec<T>> {
    let mut pieces: Vec<Vec<T>> = Vec::new();
    let mut current: Vec<T> = Vec::new();
    for item in sorted {
        let same = current.last().is_some_and(|last| same_group(last, &item));
        if current.len() >= size && !same {
            pieces.push(std::mem::take(&mut current));
        }
        current.push(item);
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}
