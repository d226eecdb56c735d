/* fuzz_tokenizer.c - tokenizer loading and encoding (engine/tokenizer/): tokenizer.json, vocab.txt,
 * vocab.json + merges.txt, SentencePiece .model files, tokenizer_config.json, then WordPiece,
 * byte-level BPE, Unigram or SentencePiece BPE encoding.
 *
 * Input: one byte of options, then parts separated by FUZZ_SEP: [first file, second file,
 * tokenizer_config.json, text]. The option byte's low two bits pick the layout (0 tokenizer.json,
 * 1 vocab.txt, 2 vocab.json + merges.txt, 3 a SentencePiece model, named sentencepiece.bpe.model
 * (fairseq's ids) when bit 7 is set, else spm.model), bit 2 splits the text into a pair, the high
 * bits a max_length. The files reach the loader from memory (eng_tokenizer_load_files, the parse code
 * eng_tokenizer_load runs on a folder's files), and the text is encoded. An encoding must hold only
 * ids of the vocabulary and byte offsets inside its text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t opt = data[0];
    fuzz_part part[FUZZ_MAX_PARTS];
    fuzz_split(data + 1, size - 1, part, FUZZ_MAX_PARTS);
    /* a present file may be empty: text is never NULL for the files of the chosen layout */
    eng_tok_text first = {(const char *)part[0].p, part[0].n}, second = {(const char *)part[1].p, part[1].n};
    eng_tok_files f = {.dir = NULL};
    switch (opt & 3) {
    case 0: f.tokenizer_json = first; break;
    case 1: f.vocab_txt = first; break;
    case 2: f.vocab_json = first, f.merges_txt = second; break;
    default:
        f.spm_model = first;
        f.spm_name = opt & 0x80 ? "sentencepiece.bpe.model" : "spm.model";
        break;
    }
    if (part[2].n) f.tokenizer_config_json = (eng_tok_text){(const char *)part[2].p, part[2].n};

    eng_tokenizer *tok = NULL;
    eng_err err;
    int rc = eng_tokenizer_load_files(&f, &tok, &err);
    fuzz_log("tokenizer", rc, err.msg);
    if (rc) return 0;
    const char *text = (const char *)part[3].p, *pair = NULL;
    size_t len = part[3].n, pair_len = 0;
    if (opt & 4) {
        pair = text + len / 2, pair_len = len - len / 2;
        len /= 2;
    }
    eng_tok_params p = eng_tok_default_params();
    p.max_length = opt >> 3; /* 0: the model's own */
    eng_tok_encoding enc;
    if (eng_tok_encode(tok, text, len, pair, pair_len, &p, &enc, &err) == 0) {
        int32_t vs = eng_tokenizer_vocab_size(tok);
        size_t most = len > pair_len ? len : pair_len;
        for (size_t i = 0; i < enc.n; i++) {
            if (enc.ids[i] < 0 || enc.ids[i] >= vs) abort();
            int32_t b0 = enc.byte_offsets[2 * i], b1 = enc.byte_offsets[2 * i + 1];
            if (b0 < 0 || b1 < b0 || (size_t)b1 > most) abort();
            const char *s = eng_tok_id_to_token(tok, enc.ids[i]);
            if (s) (void)strlen(s);
        }
        eng_tok_encoding_free(&enc);
    }
    eng_tokenizer_free(tok);
    return 0;
}
