//! The arithmetic of the RAGAS metrics, on the judge's verdicts (pure functions).
//!
//! - faithfulness: supported statements / statements of the answer;
//! - answer relevancy: mean similarity of the questions written back from the answer to
//!   the asked question (cosine of embeddings, or the judge's same-question verdicts),
//!   0 when the answer is noncommittal;
//! - context recall: reference sentences attributable to the context / reference sentences;
//! - context precision: Σ_k (precision@k · v_k) / Σ_k v_k over the ranked chunks, v_k = 1
//!   when chunk k was useful.

/// The verdict of a run in which no metric could be scored (every judgement missing).
pub const UNSCORED: &str = "UNSCORED";

/// Verdict of a global score: ≥ 0.80 `EXCELLENT`, ≥ 0.60 `ACCEPTABLE`, else `INSUFFICIENT`.
pub fn verdict(score: f64) -> &'static str {
    if score >= 0.80 {
        "EXCELLENT"
    } else if score >= 0.60 {
        "ACCEPTABLE"
    } else {
        "INSUFFICIENT"
    }
}

/// Share of 1-verdicts; `None` when there is nothing to judge.
pub fn share(verdicts: &[bool]) -> Option<f64> {
    (!verdicts.is_empty())
        .then(|| verdicts.iter().filter(|v| **v).count() as f64 / verdicts.len() as f64)
}

/// RAGAS context precision over chunks in rank order; 0 when no chunk was useful.
pub fn context_precision(useful: &[bool]) -> f64 {
    let mut hits = 0usize;
    let mut sum = 0.0;
    for (k, &v) in useful.iter().enumerate() {
        if v {
            hits += 1;
            sum += hits as f64 / (k + 1) as f64;
        }
    }
    if hits == 0 {
        0.0
    } else {
        sum / hits as f64
    }
}

/// Cosine similarity; 0 for a zero vector.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// Answer relevancy from embeddings: mean cosine (negative values count as 0) of each
/// generated question to the asked one; 0 when the answer is noncommittal.
pub fn relevancy_by_embeddings(asked: &[f32], generated: &[Vec<f32>], noncommittal: bool) -> f64 {
    if noncommittal || generated.is_empty() {
        return 0.0;
    }
    generated
        .iter()
        .map(|g| cosine(asked, g).clamp(0.0, 1.0))
        .sum::<f64>()
        / generated.len() as f64
}

/// Answer relevancy from the judge: share of generated questions that ask the same as
/// the asked one; 0 when the answer is noncommittal.
pub fn relevancy_by_verdicts(same: &[bool], noncommittal: bool) -> f64 {
    if noncommittal {
        0.0
    } else {
        share(same).unwrap_or(0.0)
    }
}

/// Mean of the scores that are present and not zero (the reference's global score);
/// 0 when there are none.
pub fn global_score(scores: &[Option<f64>]) -> f64 {
    let kept: Vec<f64> = scores
        .iter()
        .flatten()
        .copied()
        .filter(|s| *s != 0.0)
        .collect();
    if kept.is_empty() {
        0.0
    } else {
        kept.iter().sum::<f64>() / kept.len() as f64
    }
}

/// Mean of the present scores; `None` when none is.
pub fn mean(scores: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let kept: Vec<f64> = scores.into_iter().flatten().collect();
    (!kept.is_empty()).then(|| kept.iter().sum::<f64>() / kept.len() as f64)
}

/// Rounded to 4 decimals, as scores are reported (JSON and HTML show the same value).
pub fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// The sentences of a reference answer: split after `.`, `!` or `?` followed by
/// whitespace, and at line breaks. `server.port` or `0.80` stay whole.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut start = 0;
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        for (i, &(at, c)) in chars.iter().enumerate() {
            let next_is_space = chars.get(i + 1).is_none_or(|(_, n)| n.is_whitespace());
            if matches!(c, '.' | '!' | '?') && next_is_space {
                let end = at + c.len_utf8();
                push_sentence(&mut out, &line[start..end]);
                start = end;
            }
        }
        push_sentence(&mut out, &line[start..]);
    }
    out
}

fn push_sentence(out: &mut Vec<String>, s: &str) {
    let s = s.trim().trim_start_matches(['-', '*']).trim();
    if s.chars().any(char::is_alphanumeric) {
        out.push(s.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_at_their_edges() {
        assert_eq!(verdict(0.80), "EXCELLENT");
        assert_eq!(verdict(0.7999), "ACCEPTABLE");
        assert_eq!(verdict(0.60), "ACCEPTABLE");
        assert_eq!(verdict(0.5999), "INSUFFICIENT");
        assert_eq!(verdict(1.0), "EXCELLENT");
        assert_eq!(verdict(0.0), "INSUFFICIENT");
    }

    #[test]
    fn context_precision_is_rank_weighted() {
        // Useful at ranks 1 and 3: (1/1 + 2/3) / 2.
        let p = context_precision(&[true, false, true, false]);
        assert!((p - (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-12);
        // The same useful chunks ranked lower score lower.
        assert!(context_precision(&[false, true, false, true]) < p);
        assert_eq!(context_precision(&[true, true]), 1.0);
        assert_eq!(context_precision(&[false, false]), 0.0);
        assert_eq!(context_precision(&[]), 0.0);
    }

    #[test]
    fn shares_and_means() {
        assert_eq!(share(&[true, false, true, true]), Some(0.75));
        assert_eq!(share(&[]), None);
        assert_eq!(global_score(&[Some(0.9), Some(0.0), None, Some(0.6)]), 0.75);
        assert_eq!(global_score(&[Some(0.0), None]), 0.0);
        assert_eq!(mean([Some(1.0), None, Some(0.5)]), Some(0.75));
        assert_eq!(mean([None]), None);
        assert_eq!(round4(0.123_456), 0.1235);
    }

    #[test]
    fn relevancy() {
        let q = [1.0, 0.0];
        let same = vec![2.0, 0.0];
        let orthogonal = vec![0.0, 1.0];
        let opposite = vec![-1.0, 0.0];
        assert_eq!(
            relevancy_by_embeddings(&q, &[same.clone(), orthogonal, opposite], false),
            1.0 / 3.0
        );
        assert_eq!(relevancy_by_embeddings(&q, &[same], true), 0.0);
        assert_eq!(
            relevancy_by_verdicts(&[true, true, false, false], false),
            0.5
        );
        assert_eq!(relevancy_by_verdicts(&[true], true), 0.0);
    }

    #[test]
    fn reference_sentences() {
        let s = sentences(
            "Set BRISA_SERVER_PORT. It overrides server.port (0.80 is kept)!\n- ¿Y en español? Sí.\n\n",
        );
        assert_eq!(
            s,
            [
                "Set BRISA_SERVER_PORT.",
                "It overrides server.port (0.80 is kept)!",
                "¿Y en español?",
                "Sí."
            ]
        );
        assert!(sentences("  \n ... ").is_empty());
    }
}
