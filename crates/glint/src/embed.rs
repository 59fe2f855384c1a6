//! Embeddings: the hidden states a model ends on (after its output norm),
//! per token or pooled into one vector per input, as llama.cpp's
//! `--embedding` gives them.

use crate::{Batch, Context, Error};

/// How an input's token embeddings become its embedding (llama.cpp's
/// `--pooling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Every token's own embedding.
    None,
    /// The mean over the tokens.
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
}

impl std::str::FromStr for Pooling {
    type Err = Error;
    fn from_str(s: &str) -> Result<Pooling, Error> {
        Ok(match s {
            "none" => Pooling::None,
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "last" => Pooling::Last,
            _ => {
                return Err(Error::Invalid(format!(
                    "pooling {s:?}: none, mean, cls or last (rank is not supported)"
                )))
            }
        })
    }
}

impl Pooling {
    /// The pooling `model`'s GGUF asks for (`<arch>.pooling_type`); `None`
    /// when it names none, or one glint lacks (rank).
    pub fn of_model(model: &crate::Model) -> Option<Pooling> {
        let g = model.gguf();
        let arch = g.architecture().ok()?;
        let v = g.get_usize(&format!("{arch}.pooling_type")).ok()??;
        Pooling::from_gguf(u32::try_from(v).ok()?)
    }

    /// The GGUF `<arch>.pooling_type` value's pooling, if it is one of these.
    pub fn from_gguf(v: u32) -> Option<Pooling> {
        match v {
            0 => Some(Pooling::None),
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }
}

/// `v / |v|` (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for x in v {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
}

/// Embed `tokens` in sequence `seq` of `ctx` (which must keep embeddings):
/// the sequence's cells are cleared first and after. One vector per token
/// with [`Pooling::None`], else one; not normalized. The input must fit in
/// one micro-batch (`n_ubatch`), as llama.cpp asks of embedding inputs.
pub fn embed(
    ctx: &mut Context,
    seq: i32,
    tokens: &[u32],
    pooling: Pooling,
) -> Result<Vec<Vec<f32>>, Error> {
    if tokens.is_empty() {
        return Err(Error::Invalid("nothing to embed: no tokens".into()));
    }
    let n_ubatch = ctx.params().n_ubatch as usize;
    if tokens.len() > n_ubatch {
        return Err(Error::Invalid(format!(
            "input is too large to process: {} tokens, more than the micro-batch of {n_ubatch} (-ub)",
            tokens.len()
        )));
    }
    ctx.seq_rm(seq, -1, -1)?;
    let mut batch = Batch::new();
    let n = tokens.len();
    for (i, &t) in tokens.iter().enumerate() {
        let want = match pooling {
            Pooling::None | Pooling::Mean => true,
            Pooling::Cls => i == 0,
            Pooling::Last => i + 1 == n,
        };
        batch.add(t, i as i32, &[seq], want);
    }
    let out = (|| {
        ctx.decode(&batch)?;
        Ok(match pooling {
            Pooling::None => (0..n)
                .map(|i| ctx.embeddings(i).map(<[f32]>::to_vec))
                .collect::<Result<Vec<_>, Error>>()?,
            Pooling::Mean => {
                let mut sum = vec![0f64; ctx.model().hparams().n_embd];
                for i in 0..n {
                    for (s, &x) in sum.iter_mut().zip(ctx.embeddings(i)?) {
                        *s += f64::from(x);
                    }
                }
                vec![sum.into_iter().map(|s| (s / n as f64) as f32).collect()]
            }
            Pooling::Cls => vec![ctx.embeddings(0)?.to_vec()],
            Pooling::Last => vec![ctx.embeddings(n - 1)?.to_vec()],
        })
    })();
    ctx.seq_rm(seq, -1, -1)?;
    out
}
