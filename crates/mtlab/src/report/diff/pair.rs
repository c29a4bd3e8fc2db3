//! Which process of BASE is compared with which of NEW: the roots with each
//! other (whatever they ran: a different command is warned about), then the
//! others by command and order — the first `cc1` of BASE after its root with
//! the first `cc1` of NEW after its root, the second with the second, and so
//! on, in the order of each run's list (the caller's: root first, then by start).

/// A process as pairing sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Proc {
    pub pid: u32,
    pub command: String,
}

/// Indices into BASE's and NEW's lists: the pairs, then the processes of
/// each left without a partner.
#[derive(Debug, PartialEq)]
pub struct Pairing {
    pub pairs: Vec<(usize, usize)>,
    pub only_base: Vec<usize>,
    pub only_new: Vec<usize>,
}

pub fn pair(base: &[Proc], new: &[Proc]) -> Pairing {
    let mut p = Pairing { pairs: Vec::new(), only_base: Vec::new(), only_new: Vec::new() };
    if base.is_empty() || new.is_empty() {
        p.only_base = (0..base.len()).collect();
        p.only_new = (0..new.len()).collect();
        return p;
    }
    p.pairs.push((0, 0));
    let mut taken = vec![false; new.len()];
    taken[0] = true;
    for (i, b) in base.iter().enumerate().skip(1) {
        // The first NEW process of the same command not yet taken: pairs in
        // order, since both lists are walked in their order.
        match (1..new.len()).find(|&j| !taken[j] && new[j].command == b.command) {
            Some(j) => {
                taken[j] = true;
                p.pairs.push((i, j));
            }
            None => p.only_base.push(i),
        }
    }
    p.only_new = (1..new.len()).filter(|&j| !taken[j]).collect();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn procs(list: &[(u32, &str)]) -> Vec<Proc> {
        list.iter().map(|&(pid, c)| Proc { pid, command: c.to_string() }).collect()
    }

    #[test]
    fn processes_pair_by_command_and_order_after_the_roots() {
        let base = procs(&[(10, "gcc"), (11, "cc1"), (12, "as"), (13, "cc1"), (14, "ld")]);
        let new = procs(&[(20, "gcc"), (21, "cc1"), (22, "cc1"), (23, "as"), (24, "cc1")]);
        let p = pair(&base, &new);
        assert_eq!(p.pairs, [(0, 0), (1, 1), (2, 3), (3, 2)]);
        assert_eq!(p.only_base, [4]);
        assert_eq!(p.only_new, [4]);
        // Roots pair whatever they ran.
        let p = pair(&procs(&[(1, "a")]), &procs(&[(2, "b"), (3, "a")]));
        assert_eq!((p.pairs, p.only_base, p.only_new), (vec![(0, 0)], vec![], vec![1]));
        assert_eq!(pair(&[], &procs(&[(2, "b")])).only_new, [0]);
    }
}
