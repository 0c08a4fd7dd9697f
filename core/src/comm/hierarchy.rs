//! Topology-aware collectives, as NCCL's and Horovod's hierarchical ones: when a group spans
//! several hosts with several members on each, all-reduce, all-gather and reduce-scatter work
//! within each host first (shared memory) and cross the network once per host, each member of
//! a host carrying its share over its own links, instead of a flat ring whose network edges
//! carry every block.
//!
//! A [`Grid`] lays the group out as hosts x members-per-host (a pure function of the group and
//! the ranks' hosts); the collectives here are the flat ones run on the grid's rows (one host)
//! and columns (one member per host), which never nest further.

use super::Policy;
use super::plan::{Buf, Plan, Span, Step};
use super::schedule::{all_gather_flat, all_reduce_flat, balanced_counts, reduce_scatter_flat};

/// A group's members laid out by host: `cells[h][l]` is the group position of the `l`-th member
/// (in group order) of the `h`-th host (hosts in the order their first member appears).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grid {
    cells: Vec<Vec<usize>>,
}

impl Grid {
    /// The layout of `group`, whose rank `r` runs on host `host_of(r)`; `None` when a
    /// hierarchy gains nothing or does not fit: one host, one member per host, or hosts with
    /// different numbers of members (those run flat).
    pub fn of(group: &[usize], host_of: impl Fn(usize) -> usize) -> Option<Grid> {
        let mut hosts: Vec<usize> = vec![];
        let mut cells: Vec<Vec<usize>> = vec![];
        for (pos, &rank) in group.iter().enumerate() {
            let host = host_of(rank);
            match hosts.iter().position(|&h| h == host) {
                Some(h) => cells[h].push(pos),
                None => {
                    hosts.push(host);
                    cells.push(vec![pos]);
                }
            }
        }
        let per_host = cells[0].len();
        let fits = cells.len() > 1 && per_host > 1 && cells.iter().all(|c| c.len() == per_host);
        fits.then_some(Grid { cells })
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.cells.len()
    }

    /// Members on each host.
    pub fn per_host(&self) -> usize {
        self.cells[0].len()
    }

    /// (host, member on that host) of group position `pos` (`None` outside the group).
    pub fn locate(&self, pos: usize) -> Option<(usize, usize)> {
        self.cells
            .iter()
            .enumerate()
            .find_map(|(h, row)| row.iter().position(|&p| p == pos).map(|l| (h, l)))
    }

    /// The group positions on host `h`, in group order.
    pub fn row(&self, h: usize) -> &[usize] {
        &self.cells[h]
    }

    /// The group positions of each host's `l`-th member, in host order.
    pub fn column(&self, l: usize) -> Vec<usize> {
        self.cells.iter().map(|row| row[l]).collect()
    }

    /// [`Grid::locate`] for a position of the group the grid was made from (always there).
    fn cell(&self, pos: usize) -> (usize, usize) {
        self.locate(pos).unwrap_or((0, 0))
    }

    /// The world ranks of the members of this member's host and of its column.
    fn subgroups(&self, group: &[usize], (h, l): (usize, usize)) -> (Vec<usize>, Vec<usize>) {
        let ranks = |ps: &[usize]| ps.iter().map(|&p| group[p]).collect::<Vec<_>>();
        (ranks(self.row(h)), ranks(&self.column(l)))
    }

    /// The group positions in column-major order (column 0 of every host, then column 1, ...),
    /// which is how the two-step all-gather and reduce-scatter hold the blocks.
    fn column_major(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.per_host()).flat_map(move |l| self.cells.iter().map(move |row| row[l]))
    }

    /// Bytes of each column's blocks together, given per-position block sizes.
    fn column_bytes(&self, counts: &[usize]) -> Vec<usize> {
        (0..self.per_host())
            .map(|l| self.cells.iter().map(|row| counts[row[l]]).sum())
            .collect()
    }
}

/// Hierarchical all-reduce into `data` (elements of `elem` bytes) for the member at group
/// position `me`, of `data` in place or of the same offsets of `input`: a reduce-scatter
/// within its host (which reads the input), an all-reduce of its piece with the same piece of
/// every other host (the only network traffic: 1/per_host of the buffer per member), and an
/// all-gather within the host. Each element is reduced at one member and shared, so every
/// member ends bit-identical.
pub(super) fn all_reduce(
    p: &mut Plan,
    policy: &Policy,
    (group, grid): (&[usize], &Grid),
    me: usize,
    (data, input): (Span, Option<Buf>),
    elem: usize,
) {
    let at = grid.cell(me);
    let (host, column) = grid.subgroups(group, at);
    let counts = balanced_counts(data.len, elem, grid.per_host());
    let piece = p.alloc(counts[at.1]);
    let from = input.map_or(data, |b| data.with_buf(b));
    reduce_scatter_flat(p, policy, &host, at.1, &counts, from, piece);
    all_reduce_flat(p, policy, &column, at.0, (piece, None), elem);
    all_gather_flat(p, policy, &host, at.1, &counts, piece, data);
}

/// Hierarchical all-gather (member i gives `counts[i]` bytes; `out` gets them in group order):
/// the members of one column gather their blocks across hosts (each block crosses the network
/// once per other host), then each host gathers its members' columns, and the blocks are put in
/// group order.
#[allow(clippy::too_many_arguments)]
pub(super) fn all_gather(
    p: &mut Plan,
    policy: &Policy,
    group: &[usize],
    grid: &Grid,
    me: usize,
    counts: &[usize],
    mine: Span,
    out: Span,
) {
    let at = grid.cell(me);
    let (host, column) = grid.subgroups(group, at);
    let in_column: Vec<usize> = grid.column(at.1).iter().map(|&q| counts[q]).collect();
    let col = p.alloc(in_column.iter().sum());
    all_gather_flat(p, policy, &column, at.0, &in_column, mine, col);
    let all = p.alloc(out.len);
    all_gather_flat(p, policy, &host, at.1, &grid.column_bytes(counts), col, all);
    let slots = out.split(counts);
    let mut from = all.at;
    for q in grid.column_major() {
        let to = slots[q];
        p.push(Step::Copy {
            from: Span {
                at: from,
                ..to.with_buf(Buf::Scratch)
            },
            to,
        });
        from += to.len;
    }
}

/// Hierarchical reduce-scatter (`data` holds member i's chunk of `counts[i]` bytes in group
/// order; `out` gets this member's chunk reduced over the group): the chunks are regrouped by
/// column, each host reduce-scatters the columns among its members, and each column
/// reduce-scatters across hosts (each host sends its partial sums over the network once).
#[allow(clippy::too_many_arguments)]
pub(super) fn reduce_scatter(
    p: &mut Plan,
    policy: &Policy,
    group: &[usize],
    grid: &Grid,
    me: usize,
    counts: &[usize],
    data: Span,
    out: Span,
) {
    let at = grid.cell(me);
    let (host, column) = grid.subgroups(group, at);
    let chunks = data.split(counts);
    let by_column = p.alloc(data.len);
    let mut to = by_column.at;
    for q in grid.column_major() {
        let from = chunks[q];
        p.push(Step::Copy {
            from,
            to: Span {
                at: to,
                ..from.with_buf(Buf::Scratch)
            },
        });
        to += from.len;
    }
    let column_bytes = grid.column_bytes(counts);
    let col = p.alloc(column_bytes[at.1]);
    reduce_scatter_flat(p, policy, &host, at.1, &column_bytes, by_column, col);
    let in_column: Vec<usize> = grid.column(at.1).iter().map(|&q| counts[q]).collect();
    reduce_scatter_flat(p, policy, &column, at.0, &in_column, col, out);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use proptest::prelude::*;

    fn grid(group: &[usize], hosts: &[usize]) -> Option<Grid> {
        Grid::of(group, |r| hosts[r])
    }

    #[test]
    fn contiguous_hosts_make_rows_and_columns() {
        let g = grid(&[0, 1, 2, 3], &[7, 7, 9, 9]).unwrap();
        assert_eq!((g.hosts(), g.per_host()), (2, 2));
        assert_eq!((g.row(0), g.row(1)), (&[0, 1][..], &[2, 3][..]));
        assert_eq!((g.column(0), g.column(1)), (vec![0, 2], vec![1, 3]));
        assert_eq!(g.column_major().collect::<Vec<_>>(), [0, 2, 1, 3]);
        assert_eq!(g.locate(3), Some((1, 1)));
    }

    #[test]
    fn interleaved_hosts_and_reordered_groups_follow_group_order() {
        // ranks 0 and 2 on host 5, 1 and 3 on host 6; the group lists them 3, 2, 1, 0
        let g = grid(&[3, 2, 1, 0], &[5, 6, 5, 6]).unwrap();
        assert_eq!((g.row(0), g.row(1)), (&[0, 2][..], &[1, 3][..]));
        assert_eq!(g.column(1), vec![2, 3]);
    }

    #[test]
    fn layouts_that_gain_nothing_or_do_not_fit_run_flat() {
        assert_eq!(grid(&[0, 1, 2], &[0, 0, 0]), None, "one host");
        assert_eq!(grid(&[0, 1, 2], &[0, 1, 2]), None, "one member per host");
        assert_eq!(grid(&[0, 1, 2], &[0, 0, 1]), None, "uneven hosts");
        assert_eq!(grid(&[0, 2], &[0, 0, 1]), None, "a subgroup on one host");
        assert!(grid(&[0, 1, 2, 3, 4, 5], &[0, 1, 2, 0, 1, 2]).is_some());
    }

    proptest! {
        /// Over random rectangular topologies and group orders: every position sits in exactly
        /// one cell, rows share a host, columns take one member of every host, and each row
        /// keeps group order.
        #[test]
        fn grids_cover_the_group_by_host(hosts in 2usize..5, per in 2usize..4, seed in any::<u64>()) {
            let n = hosts * per;
            let mut order: Vec<usize> = (0..n).collect();
            let mut s = seed;
            for i in (1..n).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                order.swap(i, (s >> 33) as usize % (i + 1));
            }
            let host_of = |r: usize| (r * 7 + 3) % hosts;
            let g = Grid::of(&order, host_of).unwrap();
            prop_assert_eq!((g.hosts(), g.per_host()), (hosts, per));
            let mut seen: Vec<usize> = g.column_major().collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..n).collect::<Vec<_>>());
            for h in 0..hosts {
                let row = g.row(h);
                prop_assert!(row.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(row.iter().all(|&p| host_of(order[p]) == host_of(order[row[0]])));
            }
            for l in 0..per {
                let mut col_hosts: Vec<usize> = g.column(l).iter().map(|&p| host_of(order[p])).collect();
                col_hosts.sort_unstable();
                col_hosts.dedup();
                prop_assert_eq!(col_hosts.len(), hosts);
            }
        }
    }
}
