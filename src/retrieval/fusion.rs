//! Reciprocal Rank Fusion: several ranked lists become one, each item scored
//! Σ weight / (k + rank) over the lists it appears in (rank counted from 1).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use super::KnowledgeChunk;

/// A map keyed by ids for the length of one search: hashed with foldhash, not SipHash
/// (no caller chooses these keys to collide, and SipHash of every id was most of what
/// fusing cost).
pub(crate) type IdMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// An empty [`IdMap`] with room for `n` keys.
pub(crate) fn id_map<K, V>(n: usize) -> IdMap<K, V> {
    HashMap::with_capacity_and_hasher(n, foldhash::fast::RandomState::default())
}

/// Moves the chunks that define a name the query writes as code (`named`, lowercased,
/// most wanted first) to the front, the rest after in their order: "what does
/// `retry_with_backoff` return?" is answered by its definition, however many chunks call
/// it. Among them, the definition of the name named first comes first (a completion names
/// the call at its cursor first), then by rank. Their scores are raised above the best so
/// that anything ordering by score keeps them first.
pub fn definitions_first(ranked: &mut [(&Arc<KnowledgeChunk>, f32)], named: &[String]) {
    if named.is_empty() {
        return;
    }
    let wanted = |chunk: &KnowledgeChunk| {
        named
            .iter()
            .position(|n| chunk.defines.iter().any(|d| d.eq_ignore_ascii_case(n)))
            .unwrap_or(usize::MAX)
    };
    let best = ranked.first().map_or(0.0, |r| r.1);
    for entry in ranked
        .iter_mut()
        .filter(|(chunk, _)| wanted(chunk) != usize::MAX)
    {
        entry.1 += best;
    }
    // Stable: the same want keeps the rank order.
    ranked.sort_by_key(|(chunk, _)| wanted(chunk));
}

/// One ranked list and how much it counts.
pub struct Ranked<'a, T> {
    pub weight: f32,
    pub items: &'a [T],
}

/// Fuses ranked lists. Ties keep the order in which items were first seen, so the
/// result is deterministic. A weight of 0 leaves a list out.
pub fn rrf<T: Clone + Eq + Hash>(lists: &[Ranked<'_, T>], k: f32) -> Vec<(T, f32)> {
    let mut scores: IdMap<&T, (f32, usize)> = id_map(lists.iter().map(|l| l.items.len()).sum());
    let mut order = 0;
    for list in lists {
        if list.weight <= 0.0 {
            continue;
        }
        for (i, item) in list.items.iter().enumerate() {
            let entry = scores.entry(item).or_insert_with(|| {
                order += 1;
                (0.0, order)
            });
            entry.0 += list.weight / (k + (i + 1) as f32);
        }
    }
    let mut fused: Vec<(&T, (f32, usize))> = scores.into_iter().collect();
    fused.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
    fused
        .into_iter()
        .map(|(t, (s, _))| (t.clone(), s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_example() {
        // BM25: a, b, c    vectors: c, a, d    k = 60, equal weights.
        let bm25 = ["a", "b", "c"];
        let dense = ["c", "a", "d"];
        let fused = rrf(
            &[
                Ranked {
                    weight: 1.0,
                    items: &bm25,
                },
                Ranked {
                    weight: 1.0,
                    items: &dense,
                },
            ],
            60.0,
        );
        let expect = [
            ("a", 1.0 / 61.0 + 1.0 / 62.0),
            ("c", 1.0 / 63.0 + 1.0 / 61.0),
            ("b", 1.0 / 62.0),
            ("d", 1.0 / 63.0),
        ];
        assert_eq!(fused.len(), 4);
        for ((got, score), (want, want_score)) in fused.iter().zip(expect) {
            assert_eq!(*got, want);
            assert!(
                (score - want_score).abs() < 1e-7,
                "{got}: {score} vs {want_score}"
            );
        }
    }

    #[test]
    fn weights_shift_the_order_and_zero_drops_a_list() {
        let bm25 = ["a", "b"];
        let dense = ["b", "a"];
        let fused = rrf(
            &[
                Ranked {
                    weight: 1.0,
                    items: &bm25,
                },
                Ranked {
                    weight: 2.0,
                    items: &dense,
                },
            ],
            60.0,
        );
        assert_eq!(fused[0].0, "b");
        let only_bm25 = rrf(
            &[
                Ranked {
                    weight: 1.0,
                    items: &bm25,
                },
                Ranked {
                    weight: 0.0,
                    items: &dense,
                },
            ],
            60.0,
        );
        assert_eq!(
            only_bm25.iter().map(|x| x.0).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!((only_bm25[0].1 - 1.0 / 61.0).abs() < 1e-7);
    }

    #[test]
    fn ties_keep_first_seen_order() {
        let one = ["x"];
        let two = ["y"];
        let fused = rrf(
            &[
                Ranked {
                    weight: 1.0,
                    items: &one,
                },
                Ranked {
                    weight: 1.0,
                    items: &two,
                },
            ],
            60.0,
        );
        assert_eq!(fused.iter().map(|x| x.0).collect::<Vec<_>>(), ["x", "y"]);
    }
}
