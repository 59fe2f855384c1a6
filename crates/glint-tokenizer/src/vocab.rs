//! The vocabulary as llama.cpp sees it: token texts, scores, attributes,
//! special ids and the end-of-generation set (`llama_vocab::impl::load`).

use ahash::AHashMap;
use glint_gguf::{Array, GgufFile, StrArray, Value};

use crate::error::{Result, TokenizerError};

pub(crate) const KEY_MODEL: &str = "tokenizer.ggml.model";
pub(crate) const KEY_PRE: &str = "tokenizer.ggml.pre";
pub(crate) const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const KEY_SCORES: &str = "tokenizer.ggml.scores";
pub(crate) const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub(crate) const KEY_MERGES: &str = "tokenizer.ggml.merges";
pub(crate) const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
pub(crate) const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
pub(crate) const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";

/// A token's type as GGUF stores it in `tokenizer.ggml.token_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    /// 0, or any value GGUF does not define.
    Undefined,
    /// 1: ordinary text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: control (BOS, EOS, chat markers): text only when parsed as special.
    Control,
    /// 4: user-defined: always split out of the input, always rendered.
    UserDefined,
    /// 5: unused slot.
    Unused,
    /// 6: one raw byte, `<0xXX>`.
    Byte,
}

impl TokenType {
    fn from_gguf(v: i32) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }

    fn attr(self) -> u8 {
        match self {
            TokenType::Undefined => 0,
            TokenType::Normal => attr::NORMAL,
            TokenType::Unknown => attr::UNKNOWN,
            TokenType::Control => attr::CONTROL,
            TokenType::UserDefined => attr::USER_DEFINED,
            TokenType::Unused => attr::UNUSED,
            TokenType::Byte => attr::BYTE,
        }
    }
}

/// llama.cpp's token attributes (a subset: no lstrip/rstrip/normalized).
/// Attributes are a bit set because llama.cpp adds `CONTROL` to tokens it
/// recognises by name (EOT, EOG, FIM) whatever their stored type.
pub(crate) mod attr {
    pub const NORMAL: u8 = 1;
    pub const UNKNOWN: u8 = 2;
    pub const CONTROL: u8 = 4;
    pub const USER_DEFINED: u8 = 8;
    pub const UNUSED: u8 = 16;
    pub const BYTE: u8 = 32;
}

/// Tokens llama.cpp takes as end-of-turn when no `eot_token_id` key says so.
/// llama.cpp takes whichever its hash map yields first; glint takes the first
/// in this order, so `<|im_end|>` wins over `<|endoftext|>`.
const EOT_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Roles found by key or, failing that, by name; `eog` says whether the role
/// ends generation.
struct RoleRow {
    key: &'static str,
    names: &'static [&'static str],
    eog: bool,
}

const ROLES: &[RoleRow] = &[
    RoleRow {
        key: "tokenizer.ggml.eot_token_id",
        names: EOT_NAMES,
        eog: true,
    },
    RoleRow {
        key: "tokenizer.ggml.eom_token_id",
        names: &["<|eom_id|>"],
        eog: true,
    },
    RoleRow {
        key: "tokenizer.ggml.fim_pre_token_id",
        names: &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
        eog: false,
    },
    RoleRow {
        key: "tokenizer.ggml.fim_suf_token_id",
        names: &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
        eog: false,
    },
    RoleRow {
        key: "tokenizer.ggml.fim_mid_token_id",
        names: &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
        eog: false,
    },
    RoleRow {
        key: "tokenizer.ggml.fim_pad_token_id",
        names: &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
        eog: true,
    },
    RoleRow {
        key: "tokenizer.ggml.fim_rep_token_id",
        names: &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
        eog: true,
    },
    RoleRow {
        key: "tokenizer.ggml.fim_sep_token_id",
        names: &["<|file_sep|>"],
        eog: true,
    },
];

/// Token texts llama.cpp (0c1e57098) treats as end-of-generation, forcing
/// them to control tokens. `</s>` is among them: in Gemma 3 it is a
/// user-defined token that llama.cpp therefore no longer splits out of
/// plain text.
const EOG_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Token data and special ids, read from GGUF the way llama.cpp reads them.
pub(crate) struct Vocab {
    /// Token texts, by id; empty texts replaced by `[EMPTY_<id>]` as llama.cpp does.
    pub texts: StrArray,
    /// Scores, by id (0 where the file has none).
    pub scores: Vec<f32>,
    /// Stored types, by id.
    pub types: Vec<TokenType>,
    /// Attribute bits, by id (types plus what name detection added).
    pub attrs: Vec<u8>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    /// Fill-in-the-middle prefix, suffix and middle tokens.
    pub fim: [Option<u32>; 3],
    /// Sorted, deduplicated end-of-generation ids.
    pub eog: Vec<u32>,
}

impl Vocab {
    /// Reads the token list, scores and types; `default_bos`/`default_eos`
    /// are llama.cpp's defaults for the tokenizer model, used when the keys
    /// are absent.
    pub fn read(
        gguf: &GgufFile,
        default_bos: Option<u32>,
        default_eos: Option<u32>,
    ) -> Result<Vocab> {
        let stored = gguf.require_str_array(KEY_TOKENS)?;
        let n_vocab = stored.len();
        if n_vocab == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        let mut texts = StrArray::with_capacity(n_vocab, stored.text_bytes());
        for (i, t) in stored.iter().enumerate() {
            if t.is_empty() {
                texts.push(&format!("[EMPTY_{i}]"));
            } else {
                texts.push(t);
            }
        }

        let scores = read_scores(gguf, n_vocab)?;
        let types = read_types(gguf, n_vocab)?;
        let mut attrs: Vec<u8> = types.iter().map(|t| t.attr()).collect();

        let by_text = index_texts(&texts)?;
        let bos = checked_id(gguf, KEY_BOS, default_bos, n_vocab)?;
        let eos = checked_id(gguf, KEY_EOS, default_eos, n_vocab)?;
        let Roles { eot, fim, mut eog } = read_roles(gguf, &by_text, &mut attrs)?;
        eog.extend(eos);
        eog.sort_unstable();
        eog.dedup();
        eog_workarounds(&by_text, &mut eog, &mut attrs);
        drop(by_text);

        Ok(Vocab {
            texts,
            scores,
            types,
            attrs,
            bos,
            eos,
            eot,
            fim,
            eog,
        })
    }
}

/// Scores, by id. They may be f32 or i32 (llama.cpp accepts both); any
/// other type gets `require_f32_array`'s type error. Absent: all 0.
fn read_scores(gguf: &GgufFile, n_vocab: usize) -> Result<Vec<f32>> {
    let scores: Vec<f32> = match gguf.get(KEY_SCORES) {
        None => vec![0.0; n_vocab],
        Some(Value::Array(Array::I32(v))) => v.iter().map(|&x| x as f32).collect(),
        Some(_) => gguf.require_f32_array(KEY_SCORES)?.to_vec(),
    };
    check_len(KEY_SCORES, scores.len(), n_vocab)?;
    Ok(scores)
}

/// Stored token types, by id. Absent: all normal.
fn read_types(gguf: &GgufFile, n_vocab: usize) -> Result<Vec<TokenType>> {
    Ok(match gguf.get_i32_array(KEY_TOKEN_TYPE)? {
        None => vec![TokenType::Normal; n_vocab],
        Some(t) => {
            check_len(KEY_TOKEN_TYPE, t.len(), n_vocab)?;
            t[..n_vocab]
                .iter()
                .map(|&v| TokenType::from_gguf(v))
                .collect()
        }
    })
}

/// The BOS/EOS id stored at `key`, or `default` when absent (or stored as
/// 0xffffffff, the converters' "none"): an id outside the vocabulary is an
/// error naming the key, never silently another token.
fn checked_id(
    gguf: &GgufFile,
    key: &'static str,
    default: Option<u32>,
    n_vocab: usize,
) -> Result<Option<u32>> {
    match gguf.get_usize(key)? {
        Some(id) if id < n_vocab => Ok(Some(id as u32)),
        Some(id) if id as u64 == u32::MAX as u64 => Ok(default.filter(|&d| (d as usize) < n_vocab)),
        Some(id) => Err(TokenizerError::SpecialIdOutOfRange {
            key,
            id: id as u64,
            n_vocab,
        }),
        None => Ok(default.filter(|&d| (d as usize) < n_vocab)),
    }
}

/// The id stored at `key`, or `default`; an id outside the vocabulary
/// counts as absent (role tokens are optional).
fn id_key(gguf: &GgufFile, key: &str, default: Option<u32>, n_vocab: usize) -> Result<Option<u32>> {
    let default = default.filter(|&d| (d as usize) < n_vocab);
    Ok(match gguf.get_usize(key)? {
        Some(id) if id < n_vocab => Some(id as u32),
        _ => default,
    })
}

/// The role tokens a vocabulary keeps.
struct Roles {
    eot: Option<u32>,
    /// Fill-in-the-middle prefix, suffix, middle.
    fim: [Option<u32>; 3],
    /// End-of-generation ids, unsorted.
    eog: Vec<u32>,
}

/// The role tokens of [`ROLES`] (by key, else by name, which marks them
/// control tokens): EOT, the fill-in-the-middle prefix, suffix and middle,
/// and the end-of-generation ids among them and in [`EOG_NAMES`].
fn read_roles(gguf: &GgufFile, by_text: &AHashMap<&str, u32>, attrs: &mut [u8]) -> Result<Roles> {
    let mut eog: Vec<u32> = Vec::new();
    let mut eot = None;
    let mut fim = [None; 3];
    for row in ROLES {
        let mut id = id_key(gguf, row.key, None, attrs.len())?;
        if id.is_none() {
            id = row.names.iter().find_map(|n| by_text.get(n).copied());
            if let Some(i) = id {
                attrs[i as usize] |= attr::CONTROL;
            }
        }
        match row.key {
            "tokenizer.ggml.eot_token_id" => eot = id,
            "tokenizer.ggml.fim_pre_token_id" => fim[0] = id,
            "tokenizer.ggml.fim_suf_token_id" => fim[1] = id,
            "tokenizer.ggml.fim_mid_token_id" => fim[2] = id,
            _ => {}
        }
        if row.eog {
            eog.extend(id);
        }
    }
    for name in EOG_NAMES {
        if let Some(&i) = by_text.get(name) {
            eog.push(i);
            attrs[i as usize] |= attr::CONTROL;
        }
    }
    Ok(Roles { eot, fim, eog })
}

/// llama.cpp's workarounds: with both <|return|> and <|call|> (or
/// <|calls|> and <|flush|>), <|end|> is not end-of-generation; with
/// <|tool_response>, </s> is a normal token.
fn eog_workarounds(by_text: &AHashMap<&str, u32>, eog: &mut Vec<u32>, attrs: &mut [u8]) {
    let has = |eog: &[u32], t: &str| by_text.get(t).is_some_and(|i| eog.contains(i));
    if (has(eog, "<|return|>") && has(eog, "<|call|>"))
        || (has(eog, "<|calls|>") && has(eog, "<|flush|>"))
    {
        if let Some(&i) = by_text.get("<|end|>") {
            eog.retain(|&e| e != i);
            attrs[i as usize] = attr::USER_DEFINED;
        }
    }
    if has(eog, "<|tool_response>") {
        if let Some(&i) = by_text.get("</s>") {
            eog.retain(|&e| e != i);
            attrs[i as usize] = attr::NORMAL;
        }
    }
}

/// Map from text to id; duplicate texts are an error, as in llama.cpp.
pub(crate) fn index_texts(texts: &StrArray) -> Result<AHashMap<&str, u32>> {
    let mut m: AHashMap<&str, u32> = AHashMap::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        if let Some(first) = m.insert(t, i as u32) {
            return Err(TokenizerError::DuplicateToken {
                text: t.to_owned(),
                first,
                second: i as u32,
            });
        }
    }
    Ok(m)
}

fn check_len(key: &'static str, found: usize, n_vocab: usize) -> Result<()> {
    if found < n_vocab {
        return Err(TokenizerError::ArrayTooShort {
            key,
            found,
            n_vocab,
        });
    }
    Ok(())
}
