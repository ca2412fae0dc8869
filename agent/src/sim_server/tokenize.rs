//! The sim-server's deterministic tokenization rule, and how prompts become prefix-cache blocks.
//!
//! **Rule.** Whitespace separates pieces and is not itself a token. Inside a whitespace-separated word, a token is
//! a maximal run of ASCII letters/digits/`_`, or a maximal run of other characters; any piece longer than 8 bytes
//! is split every 8 bytes (on a character boundary). So `resolve(self,` is 4 tokens (`resolve`, `(`, `self`,
//! `,`), `placed,` is 2, `internationalization` is 3. On the filler corpora this gives about 1.07 tokens per prose
//! word and 2.4 per code word (a real BPE tokenizer gives 1.125 and 1.80), so `usage.prompt_tokens` is of the same
//! order as the designed size but not equal to it; the cached SHARE is what the rule keeps honest.
//!
//! Each token's id is a 32-bit FNV-1a hash of its bytes. The full blocks of `block_size` tokens are chained-hashed
//! with `shared::engine::PromptBlocks::from_tokens` (each block's hash covers all tokens before it, as vLLM's
//! prefix cache does), so two prompts share cached blocks exactly as far as they share a token prefix. The hashes
//! also cover the output the server will stream (its tokens are known in advance), so, as in vLLM, the next
//! prompt that resends prompt + reply hits the cache for both.
//!
//! Generated text is a sequence of `" word"` tokens from a small vocabulary, so a reply re-sent inside the next
//! prompt tokenizes back to exactly the same number of tokens.

const MAX_PIECE_BYTES: usize = 8;

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Token ids of `text` under the rule above.
pub fn tokenize(text: &str) -> Vec<u32> {
    let mut out = Vec::with_capacity(text.len() / 4 + 1);
    for_each_piece(text, |piece| out.push(fnv1a(piece.as_bytes())));
    out
}

/// [`tokenize`] with every piece counted as `per_piece` tokens (the piece's id, then derived ids): a tokenizer
/// that counts `per_piece` times as many tokens, for tests of clients that measure the server's tokenizer
/// (`loadshape sim-server --tokens-per-piece`). `per_piece` 1 (or 0) is [`tokenize`].
pub fn tokenize_with(text: &str, per_piece: u32) -> Vec<u32> {
    let mut out = Vec::with_capacity(text.len() / 4 + 1);
    for_each_piece(text, |piece| push_piece(&mut out, fnv1a(piece.as_bytes()), per_piece));
    out
}

fn push_piece(out: &mut Vec<u32>, id: u32, per_piece: u32) {
    out.push(id);
    for k in 1..per_piece {
        out.push(id ^ k.wrapping_mul(0x9e37_79b9));
    }
}

/// The ids [`tokenize_with`] gives for generated token `i` of request `req` (its text re-sent in a prompt).
pub fn gen_token_ids(req: u64, i: u32, per_piece: u32, out: &mut Vec<u32>) {
    push_piece(out, gen_token_id(req, i), per_piece);
}

/// Number of tokens of `text` under the rule above (no allocation).
pub fn count_tokens(text: &str) -> usize {
    let mut n = 0;
    for_each_piece(text, |_| n += 1);
    n
}

fn for_each_piece(text: &str, mut f: impl FnMut(&str)) {
    for word in text.split_whitespace() {
        let bytes = word.as_bytes();
        let mut start = 0;
        while start < bytes.len() {
            let class = is_word_byte(bytes[start]);
            let mut end = start + 1;
            while end < bytes.len() && is_word_byte(bytes[end]) == class {
                end += 1;
            }
            // split long runs every MAX_PIECE_BYTES, on char boundaries
            let mut s = start;
            while s < end {
                let mut e = (s + MAX_PIECE_BYTES).min(end);
                while e < end && !word.is_char_boundary(e) {
                    e += 1;
                }
                f(&word[s..e]);
                s = e;
            }
            start = end;
        }
    }
}

/// The generated vocabulary: plain lowercase words, each emitted with a leading space.
pub const VOCAB: [&str; 16] = [
    " the",
    " shard",
    " loader",
    " check",
    " patch",
    " manifest",
    " test",
    " planner",
    " reads",
    " verify",
    " model",
    " refuses",
    " because",
    " entry",
    " index",
    " returns",
];

/// Token id of generated token `i` of request `req` (what [`tokenize`] gives for its text).
pub fn gen_token_id(req: u64, i: u32) -> u32 {
    fnv1a(gen_token(req, i).trim_start().as_bytes())
}

/// Text of generated token `i` of request `req` (deterministic).
pub fn gen_token(req: u64, i: u32) -> &'static str {
    let h = (req.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(i).wrapping_mul(0xbf58_476d_1ce4_e5b9)) >> 60;
    VOCAB[h as usize & 15]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_examples() {
        assert_eq!(count_tokens("resolve(self,"), 4);
        assert_eq!(count_tokens("placed,"), 2);
        assert_eq!(count_tokens("internationalization"), 3);
        assert_eq!(count_tokens("  a\n\nb  "), 2);
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("ééééééééé"), 3); // 18 bytes: 8, 8, 2
        assert_eq!(tokenize("a b"), tokenize("a\nb"));
    }

    #[test]
    fn tokens_per_piece_multiplies_the_count() {
        let text = "resolve(self, placed, ";
        assert_eq!(tokenize_with(text, 1), tokenize(text));
        assert_eq!(tokenize_with(text, 3).len(), 3 * tokenize(text).len());
        let mut ids = Vec::new();
        (0..5).for_each(|i| gen_token_ids(7, i, 2, &mut ids));
        let reply: String = (0..5).map(|i| gen_token(7, i)).collect();
        assert_eq!(tokenize_with(&reply, 2), ids);
    }

    #[test]
    fn generated_text_round_trips() {
        let text: String = (0..50).map(|i| gen_token(7, i)).collect();
        assert_eq!(count_tokens(&text), 50);
        let ids: Vec<u32> = (0..50).map(|i| gen_token_id(7, i)).collect();
        assert_eq!(tokenize(&text), ids);
    }

    #[test]
    fn blocks_share_exactly_the_common_prefix() {
        let a = tokenize(&"x y z ".repeat(20)); // 60 tokens
        let mut b = a.clone();
        b[40] ^= 1;
        let blocks = |t: &[u32]| shared::engine::PromptBlocks::from_tokens(t, 16).block_hashes;
        let (ha, hb) = (blocks(&a), blocks(&b));
        assert_eq!(ha.len(), 3);
        assert_eq!(ha[..2], hb[..2]);
        assert_ne!(ha[2], hb[2]);
    }
}
