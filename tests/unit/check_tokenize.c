/* Unit tests of the tokenizer that reads a training text a piece at a time
 * (sl_tokenize_stream, src/data/sl_tokenize.c): whatever the piece size, it finds the
 * tokens, the <eos> of a last line without a newline, and the first invalid UTF-8 byte
 * that sl_tokenize finds in the whole text at once; it hashes and counts every byte, and
 * a read error is one line naming the file. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "data/sl_data.h"
#include "data/sl_data_internal.h"

#include "test_tool.h"

#define HASH_SEED 77u

/* What the stream gives: its tokens interned into a vocabulary, in order. */
typedef struct {
    sl_vocab_t *v;
    sl_idbuf_t ids;
} sink_t;

static sl_status_t
intern(void *ctx, const char *tok, size_t n)
{
    sink_t *s = ctx;
    int32_t id = s->v->eos;

    if (n)
        SL_TRY(sl_vocab_intern(s->v, tok, n, &id));
    return sl_idbuf_push(&s->ids, id, "test");
}

/* A vocabulary with <eos> and <unk> named, as sl_tokenize needs them. */
static sl_vocab_t *
new_vocab(void)
{
    sl_vocab_t *v = NULL;
    int32_t id;

    ck_assert_int_eq(sl_vocab_new(&v, 64), SL_OK);
    ck_assert_int_eq(sl_vocab_intern(v, "<eos>", 5, &id), SL_OK);
    v->eos = id;
    ck_assert_int_eq(sl_vocab_intern(v, "<unk>", 5, &id), SL_OK);
    v->unk = id;
    return v;
}

/* Pieces a text is made of: words, the separators, 2- to 4-byte characters, specials,
 * and (rarely) bytes that are no UTF-8: a stray 0xFF, a lead byte without its
 * continuation, a surrogate, an overlong form. */
static const char *const good_piece[] = {"a",     "bc",       "word",         " ",
                                         "  ",    "\t",       "\r",           "\n",
                                         "\n\n",  "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                         "<unk>", "<eos>"};
static const char *const bad_piece[] = {"\xff",     "\xc3",     "\xed\xa0\x80",
                                        "\xc0\xaf", "\xe2\x82", "\xf0\x9f\x98"};

static size_t
random_text(sl_rng_t *rng, char *buf, size_t cap, int with_bad)
{
    size_t len = 0, pieces = sl_rng_below(rng, 120);

    for (size_t i = 0; i < pieces; i++) {
        const char *p;
        if (with_bad && sl_rng_below(rng, 40) == 0)
            p = bad_piece[sl_rng_below(rng, sizeof bad_piece / sizeof *bad_piece)];
        else
            p = good_piece[sl_rng_below(rng, sizeof good_piece / sizeof *good_piece)];
        if (len + strlen(p) >= cap)
            break;
        memcpy(buf + len, p, strlen(p));
        len += strlen(p);
    }
    return len;
}

/* The stream over text (len bytes) in pieces of chunk, against sl_tokenize of it
 * whole, with the stream's vocabulary: the same ids, or the same error. */
static void
check_text(const char *text, size_t len, sl_level_t level, size_t chunk)
{
    sink_t s = {new_vocab(), {0}};
    sl_tokens_t whole;
    sl_hash_t h, want_h;
    uint64_t bytes = 0;
    char stream_msg[512];
    sl_status_t st = SL_OK, want;
    FILE *fp = len ? fmemopen((void *)text, len, "rb") : NULL;

    sl_hash_init(&h, HASH_SEED);
    if (fp) {
        st = sl_tokenize_stream(fp, "t.txt", level, chunk, intern, &s, &h, &bytes);
        fclose(fp);
    }
    snprintf(stream_msg, sizeof stream_msg, "%s", st == SL_OK ? "" : sl_err_msg());
    sl_err_clear();
    want = sl_tokenize(s.v, level, "t.txt", text, len, 1, &whole);
    if (want != SL_OK) {
        ck_assert_msg(st == want, "chunk %zu, %zu bytes: stream %d, whole %d (%s)", chunk, len, st,
                      want, sl_err_msg());
        ck_assert_str_eq(stream_msg, sl_err_msg());
        sl_err_clear();
    } else {
        ck_assert_msg(st == SL_OK, "chunk %zu, %zu bytes: %s", chunk, len, stream_msg);
        size_t i = 0; /* one assertion a text: Check records every passing one */
        while (i < whole.len && i < s.ids.len && s.ids.ids[i] == whole.ids[i])
            i++;
        ck_assert_msg(i == whole.len && i == s.ids.len,
                      "chunk %zu: %zu tokens, want %zu; the first difference at token %zu", chunk,
                      s.ids.len, whole.len, i);
        sl_hash_init(&want_h, HASH_SEED);
        sl_hash_update(&want_h, text, len);
        ck_assert_msg(bytes == len && sl_hash_final(&h) == sl_hash_final(&want_h),
                      "chunk %zu: %llu bytes of %zu read, or another hash", chunk,
                      (unsigned long long)bytes, len);
        free(whole.ids);
    }
    free(s.ids.ids);
    sl_vocab_destroy(&s.v);
}

static const size_t chunks[] = {1, 2, 3, 4, 5, 7, 8, 13, 64, 1 << 20};

/* Random texts of every kind of piece, at both levels, every piece size. */
START_TEST(test_stream_as_whole)
{
    sl_rng_t rng;
    char text[1024];

    sl_rng_init(&rng, 1234);
    for (int round = 0; round < 400; round++) {
        size_t len = random_text(&rng, text, sizeof text, round % 2);
        for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
            check_text(text, len, SL_LEVEL_WORD, chunks[c]);
            check_text(text, len, SL_LEVEL_CHAR, chunks[c]);
        }
    }
}
END_TEST

/* Cases a random text may miss: a word many pieces long, a last line without a newline
 * or ending in a space, a character cut by every piece boundary, an invalid byte just
 * past a piece, a text of separators only, a file of one byte. */
START_TEST(test_stream_edges)
{
    static const char *const texts[] = {
        "a b\nc",
        "a b \t",
        "\n",
        " ",
        "x",
        "\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xe2\x82\xac\xc3\xa9",
        "abcdefg\xff",
        "abc\n\xe2\x82",
        "\xe2\x82 abc",
        "a\r\n\r\nb\r\n",
    };
    char long_word[5000];

    memset(long_word, 'w', sizeof long_word);
    memcpy(long_word + 2000, " \xc3\xa9\n", 4);
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            check_text(texts[i], strlen(texts[i]), SL_LEVEL_WORD, chunks[c]);
            check_text(texts[i], strlen(texts[i]), SL_LEVEL_CHAR, chunks[c]);
        }
        check_text(long_word, sizeof long_word, SL_LEVEL_WORD, chunks[c]);
    }
}
END_TEST

/* A stream that cannot be read (a directory) is one line naming it. */
START_TEST(test_stream_read_error)
{
    sink_t s = {new_vocab(), {0}};
    uint64_t bytes;
    FILE *fp = fopen("/", "rb");

    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(sl_tokenize_stream(fp, "/", SL_LEVEL_WORD, 64, intern, &s, NULL, &bytes),
                     SL_ERR_IO);
    ck_assert_msg(strncmp(sl_err_msg(), "/: read error: ", 15) == 0 && !strchr(sl_err_msg(), '\n'),
                  "%s", sl_err_msg());
    fclose(fp);
    sl_err_clear();
    free(s.ids.ids);
    sl_vocab_destroy(&s.v);
}
END_TEST

static Suite *
tokenize_suite(void)
{
    Suite *s = suite_create("tokenize");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 120);
    tcase_add_test(core, test_stream_as_whole);
    tcase_add_test(core, test_stream_edges);
    tcase_add_test(core, test_stream_read_error);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    sl_log_set_level(SL_LOG_WARN);
    return test_main(tokenize_suite());
}
