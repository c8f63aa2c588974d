/* Unit tests of src/data: word and character vocabularies worked by hand, the real
 * Brown and tinyshakespeare corpora, UTF-8 and input errors, and the token cache (the
 * batcher: check_batcher.c; how the nodes of a run load a corpus: check_corpus_load.c).
 * Files go to a temporary directory that the parent process removes. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"

#include "test_tool.h"

static char tmpdir[256]; /* made by the unchecked fixture, in the parent */

static void
make_tmpdir(void)
{
    strcpy(tmpdir, "/tmp/check_data.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void
remove_tmpdir(void)
{
    test_remove_tree(tmpdir);
}

/* "<tmpdir>/name" in a static buffer (one of four, so a few can be live at once). */
static const char *
tmp_path(const char *name)
{
    static char bufs[4][512];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static const char *
write_file(const char *name, const void *data, size_t bytes)
{
    const char *path = tmp_path(name);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(data, 1, bytes, fp), bytes);
    ck_assert_int_eq(fclose(fp), 0);
    return path;
}

static const char *
data_path(const char *rel)
{
    static char bufs[3][1024];
    static int next;
    char *b = bufs[next++ % 3];
    const char *root = getenv("SHOAL_DATA"), *src = getenv("SHOAL_SRCDIR");
    if (root)
        snprintf(b, 1024, "%s/%s", root, rel);
    else /* run by hand: the data sits beside the source tree */
        snprintf(b, 1024, "%s/../shared/data/%s", src ? src : "..", rel);
    return b;
}

/* Replaces a config string (owned by the config) with a copy of value (NULL stays NULL). */
static void
set_str(char **field, const char *value)
{
    free(*field);
    *field = value ? strdup(value) : NULL;
}

/* The defaults with the data section set as given; the cache goes under tmpdir. */
static void
cfg_make(sl_config_t *cfg, const char *train, const char *valid, const char *test, sl_level_t level,
         int vocab_size)
{
    sl_config_init(cfg);
    set_str(&cfg->data.train, train);
    set_str(&cfg->data.valid, valid);
    set_str(&cfg->data.test, test);
    set_str(&cfg->data.cache_dir, tmp_path("cache"));
    cfg->data.level = level;
    cfg->data.vocab_size = vocab_size;
    cfg->data.valid_fraction = 0;
    cfg->data.max_tokens = 0;
}

static void
assert_ids(const sl_tokens_t *t, const int32_t *want, size_t n)
{
    ck_assert_uint_eq(t->len, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(t->ids[i] == want[i], "token %zu: id %d, want %d", i, t->ids[i], want[i]);
}

/* Two corpora hold the same vocabulary (words, counts, specials) and ids. */
static void
assert_same_corpus(const sl_corpus_t *a, const sl_corpus_t *b)
{
    int n = sl_vocab_size(a->vocab);
    ck_assert_int_eq(sl_vocab_size(b->vocab), n);
    ck_assert_int_eq(sl_vocab_unk(b->vocab), sl_vocab_unk(a->vocab));
    ck_assert_int_eq(sl_vocab_eos(b->vocab), sl_vocab_eos(a->vocab));
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(sl_vocab_word(b->vocab, i), sl_vocab_word(a->vocab, i));
        ck_assert_int_eq(sl_vocab_count(b->vocab, i), sl_vocab_count(a->vocab, i));
    }
    ck_assert_uint_eq(b->hash, a->hash);
    const sl_tokens_t *pa[3] = {&a->train, &a->valid, &a->test};
    const sl_tokens_t *pb[3] = {&b->train, &b->valid, &b->test};
    for (int k = 0; k < 3; k++) {
        ck_assert_uint_eq(pb[k]->len, pa[k]->len);
        if (pa[k]->len)
            ck_assert(memcmp(pb[k]->ids, pa[k]->ids, pa[k]->len * sizeof(int32_t)) == 0);
    }
}

/* Runs sl_corpus_load with stderr sent to a file; returns what was logged (malloc'd). */
static char *
load_capturing_log(sl_corpus_t *c, const sl_config_t *cfg, sl_status_t *st)
{
    const char *log = tmp_path("stderr.log");
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    sl_log_set_level(SL_LOG_WARN); /* whatever SHOAL_LOG says */
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    dup2(fd, 2);
    close(fd);
    *st = sl_corpus_load(c, cfg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *fp = fopen(log, "rb");
    char *text = calloc(1, 8192);
    ck_assert_ptr_nonnull(fp);
    size_t n = fread(text, 1, 8191, fp);
    text[n] = '\0';
    fclose(fp);
    return text;
}

static int
count_substr(const char *s, const char *sub)
{
    int n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

/* The small text used by the hand-worked tests. Word counts: the 3, cat 2, sat 2,
 * a 1, dog 1, mat 1, on 1; 4 lines (an empty one, a last one without newline); tabs,
 * doubled spaces and a CR are separators. 15 tokens in all. */
static const char small_text[] = "the cat sat\n"
                                 "the\tdog  sat on the mat\r\n"
                                 "\n"
                                 "a cat";

/* vocab_size 4 keeps the, cat, sat (cat < sat by bytes) and a (a < dog < mat < on);
 * <unk> = dog + on + mat = 3, <eos> = 4. Order by count, ties by bytes ('<' < 't'):
 * <eos> 4, <unk> 3, the 3, cat 2, sat 2, a 1. */
START_TEST(test_word_vocab_by_hand)
{
    const char *train = write_file("small.txt", small_text, sizeof small_text - 1);
    const char *valid = write_file("small_valid.txt", "the zebra\ncat", 13);
    sl_config_t cfg;
    sl_corpus_t c;
    cfg_make(&cfg, train, valid, NULL, SL_LEVEL_WORD, 4);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_int_eq(c.from_cache, 0);

    static const char *words[] = {"<eos>", "<unk>", "the", "cat", "sat", "a"};
    static const long counts[] = {4, 3, 3, 2, 2, 1};
    ck_assert_int_eq(sl_vocab_size(c.vocab), 6);
    for (int i = 0; i < 6; i++) {
        ck_assert_str_eq(sl_vocab_word(c.vocab, i), words[i]);
        ck_assert_int_eq(sl_vocab_count(c.vocab, i), counts[i]);
        ck_assert_int_eq(sl_vocab_id(c.vocab, words[i], strlen(words[i])), i);
    }
    ck_assert_int_eq(sl_vocab_eos(c.vocab), 0);
    ck_assert_int_eq(sl_vocab_unk(c.vocab), 1);
    ck_assert_int_eq(sl_vocab_id(c.vocab, "dog", 3), 1);
    ck_assert_int_eq(sl_vocab_id(c.vocab, "cats", 3), 3); /* only len bytes count */
    ck_assert_ptr_null(sl_vocab_word(c.vocab, 6));
    ck_assert_int_eq(sl_vocab_count(c.vocab, -1), -1);

    /* the cat sat <eos> | the dog sat on the mat <eos> | <eos> | a cat <eos> */
    static const int32_t want[] = {2, 3, 4, 0, 2, 1, 4, 1, 2, 1, 0, 0, 5, 3, 0};
    assert_ids(&c.train, want, 15);
    static const int32_t want_valid[] = {2, 1, 0, 3, 0}; /* the zebra <eos> cat <eos> */
    assert_ids(&c.valid, want_valid, 5);
    ck_assert_uint_eq(c.test.len, 0);
    ck_assert_ptr_null(c.test.ids);
    sl_corpus_fini(&c);
    ck_assert_ptr_null(c.vocab);
    sl_config_fini(&cfg);
}
END_TEST

/* valid_fraction 0.2 of 15 tokens: the first floor(15 * 0.8) = 12 train, the last 3
 * (a cat <eos>) validate, and only the 12 are counted: <eos> 3, the 3, sat 2, then
 * cat dog mat on 1 each, <unk> 0 ("a" appears only in the held-out part).
 * max_tokens 5 then keeps the first 5 training ids and leaves the vocabulary alone. */
START_TEST(test_word_valid_fraction_and_max_tokens)
{
    const char *train = write_file("small.txt", small_text, sizeof small_text - 1);
    sl_config_t cfg;
    sl_corpus_t c;
    cfg_make(&cfg, train, "", NULL, SL_LEVEL_WORD, 0);
    cfg.data.valid_fraction = 0.2;
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);

    static const char *words[] = {"<eos>", "the", "sat", "cat", "dog", "mat", "on", "<unk>"};
    static const long counts[] = {3, 3, 2, 1, 1, 1, 1, 0};
    ck_assert_int_eq(sl_vocab_size(c.vocab), 8);
    for (int i = 0; i < 8; i++) {
        ck_assert_str_eq(sl_vocab_word(c.vocab, i), words[i]);
        ck_assert_int_eq(sl_vocab_count(c.vocab, i), counts[i]);
    }
    static const int32_t want[] = {1, 3, 2, 0, 1, 4, 2, 6, 1, 5, 0, 0};
    assert_ids(&c.train, want, 12);
    static const int32_t want_valid[] = {7, 3, 0};
    assert_ids(&c.valid, want_valid, 3);
    uint64_t hash_all = c.hash;
    sl_corpus_fini(&c);

    cfg.data.max_tokens = 5;
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_int_eq(c.from_cache, 0); /* another setting, another cache file */
    ck_assert_uint_ne(c.hash, hash_all);
    ck_assert_int_eq(sl_vocab_size(c.vocab), 8);
    assert_ids(&c.train, want, 5);
    assert_ids(&c.valid, want_valid, 3);
    sl_corpus_fini(&c);
    sl_config_fini(&cfg);
}
END_TEST

/* The first line of brown/train.txt, split on spaces by hand here, against the ids. */
START_TEST(test_brown_first_line)
{
    char line[4096];
    FILE *fp = fopen(data_path("brown/train.txt"), "r");
    ck_assert_ptr_nonnull(fp);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, fp));
    fclose(fp);
    line[strcspn(line, "\n")] = '\0';

    sl_config_t cfg;
    sl_corpus_t c;
    cfg_make(&cfg, data_path("brown/train.txt"), NULL, NULL, SL_LEVEL_WORD, 10000);
    cfg.data.max_tokens = 100;
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_uint_eq(c.train.len, 100);

    /* "topping" (2), "configuration" (7) and "inferences" (4) are out of the top 10000,
     * whose last words have count 7 and end at "Marina" in byte order (Python Counter) */
    size_t i = 0;
    int unks = 0;
    for (char *save = NULL, *w = strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        int id = c.train.ids[i++];
        ck_assert_int_eq(sl_vocab_id(c.vocab, w, strlen(w)), id);
        if (id == sl_vocab_unk(c.vocab)) {
            unks++;
            ck_assert(!strcmp(w, "topping") || !strcmp(w, "configuration") ||
                      !strcmp(w, "inferences"));
        } else {
            ck_assert_str_eq(sl_vocab_word(c.vocab, id), w);
        }
    }
    ck_assert_int_eq(unks, 3);
    ck_assert_uint_eq(i, 13); /* "But briefly , the topping ... inferences ." */
    ck_assert_int_ne(sl_vocab_id(c.vocab, "Marina", 6), sl_vocab_unk(c.vocab));
    ck_assert_int_eq(sl_vocab_count(c.vocab, sl_vocab_id(c.vocab, "Marina", 6)), 7);
    ck_assert_int_eq(c.train.ids[13], sl_vocab_eos(c.vocab));
    ck_assert_str_eq(sl_vocab_word(c.vocab, c.train.ids[0]), "But");
    ck_assert_str_eq(sl_vocab_word(c.vocab, c.train.ids[2]), ",");
    ck_assert_str_eq(sl_vocab_word(c.vocab, c.train.ids[12]), ".");
    sl_corpus_fini(&c);
    sl_config_fini(&cfg);
}
END_TEST

/* Lines, space-separated words and occurrences of one word, counted here in plain C. */
static void
count_text(const char *path, long *lines, long *words, long *n_word, const char *word)
{
    FILE *fp = fopen(path, "r");
    char cur[1024];
    size_t len = 0;
    int c;

    ck_assert_ptr_nonnull(fp);
    *lines = *words = *n_word = 0;
    do {
        c = fgetc(fp);
        if (c == ' ' || c == '\n' || c == EOF) {
            if (len) {
                (*words)++;
                cur[len] = '\0';
                if (strcmp(cur, word) == 0)
                    (*n_word)++;
            }
            len = 0;
            if (c == '\n')
                (*lines)++;
        } else if (len < sizeof cur - 1) {
            cur[len++] = (char)c;
        }
    } while (c != EOF);
    fclose(fp);
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Full Brown: sizes from independent counts, Zipf order, then the cache: a second
 * load is a hit with the same data, a damaged cache is rebuilt with a warning. */
START_TEST(test_brown_full_and_cache)
{
    long lines[3], words[3], n_the[3];
    const char *files[3] = {"brown/train.txt", "brown/valid.txt", "brown/test.txt"};
    for (int k = 0; k < 3; k++)
        count_text(data_path(files[k]), &lines[k], &words[k], &n_the[k], "the");
    ck_assert_int_eq(words[0], 1046149); /* as the corpus README says */

    sl_config_t cfg;
    sl_corpus_t c, again;
    cfg_make(&cfg, data_path(files[0]), data_path(files[1]), data_path(files[2]), SL_LEVEL_WORD,
             10000);
    double t0 = now_s();
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    double t1 = now_s();
    fprintf(stderr, "check_data: Brown first load %.3f s\n", t1 - t0);
    ck_assert_int_eq(c.from_cache, 0);
    ck_assert_int_eq(sl_vocab_size(c.vocab), 10002);
    ck_assert_uint_eq(c.train.len, (size_t)(words[0] + lines[0]));
    ck_assert_uint_eq(c.valid.len, (size_t)(words[1] + lines[1]));
    ck_assert_uint_eq(c.test.len, (size_t)(words[2] + lines[2]));

    /* counts: non-increasing in id, summing to the training tokens; <eos> = lines;
     * <unk> = the training tokens that map to it; "the" as counted here */
    const sl_vocab_t *v = c.vocab;
    long sum = 0, unk_seen = 0;
    for (int i = 0; i < 10002; i++) {
        sum += sl_vocab_count(v, i);
        if (i)
            ck_assert_int_le(sl_vocab_count(v, i), sl_vocab_count(v, i - 1));
    }
    ck_assert_int_eq(sum, (long)c.train.len);
    for (size_t i = 0; i < c.train.len; i++)
        unk_seen += c.train.ids[i] == sl_vocab_unk(v);
    ck_assert_int_eq(sl_vocab_count(v, sl_vocab_unk(v)), unk_seen);
    ck_assert_int_eq(sl_vocab_count(v, sl_vocab_eos(v)), lines[0]);
    ck_assert_int_eq(sl_vocab_count(v, sl_vocab_id(v, "the", 3)), n_the[0]);
    /* 87002 words fall outside the top 10000 (Python Counter), more than any word;
     * "the" (56515) is next, then "," (52660) and the 52141 lines */
    ck_assert_int_eq(sl_vocab_unk(v), 0);
    ck_assert_int_eq(unk_seen, 87002);
    ck_assert_str_eq(sl_vocab_word(v, 1), "the");
    ck_assert_str_eq(sl_vocab_word(v, 2), ",");
    ck_assert_int_eq(sl_vocab_eos(v), 3);

    /* second load: from the cache, identical */
    t0 = now_s();
    ck_assert_int_eq(sl_corpus_load(&again, &cfg), SL_OK);
    fprintf(stderr, "check_data: Brown cached load %.3f s\n", now_s() - t0);
    ck_assert_int_eq(again.from_cache, 1);
    assert_same_corpus(&c, &again);
    sl_corpus_fini(&again);

    /* one flipped byte in the middle of the ids: rebuilt, correct, then cached again */
    char cache_file[600];
    snprintf(cache_file, sizeof cache_file, "%s/%016llx.tokens", tmp_path("cache"),
             (unsigned long long)c.hash);
    FILE *fp = fopen(cache_file, "r+b");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(fseek(fp, 0, SEEK_END), 0);
    long size = ftell(fp);
    ck_assert_int_gt(size, (long)c.train.len * 4);
    ck_assert_int_eq(fseek(fp, size / 2, SEEK_SET), 0);
    int byte = fgetc(fp);
    ck_assert_int_eq(fseek(fp, size / 2, SEEK_SET), 0);
    fputc(byte ^ 0x10, fp);
    fclose(fp);
    sl_status_t st;
    char *log = load_capturing_log(&again, &cfg, &st);
    ck_assert_int_eq(st, SL_OK);
    ck_assert_int_eq(again.from_cache, 0);
    ck_assert_msg(count_substr(log, "corrupt token cache (checksum mismatch)") == 1, "log: %s",
                  log);
    free(log);
    assert_same_corpus(&c, &again);
    sl_corpus_fini(&again);
    ck_assert_int_eq(sl_corpus_load(&again, &cfg), SL_OK);
    ck_assert_int_eq(again.from_cache, 1);
    assert_same_corpus(&c, &again);
    sl_corpus_fini(&again);

    /* a truncated cache is caught by its size */
    ck_assert_int_eq(truncate(cache_file, size - 3), 0);
    log = load_capturing_log(&again, &cfg, &st);
    ck_assert_int_eq(st, SL_OK);
    ck_assert_int_eq(again.from_cache, 0);
    ck_assert_msg(count_substr(log, "corrupt token cache (file size") == 1, "log: %s", log);
    free(log);
    assert_same_corpus(&c, &again);
    sl_corpus_fini(&again);
    sl_corpus_fini(&c);
    sl_config_fini(&cfg);
}
END_TEST

/* tinyshakespeare at char level: 65 distinct characters + <unk>, first 90% train. */
START_TEST(test_char_shakespeare)
{
    const long n = 1115394;         /* characters (all ASCII), from the corpus README */
    const size_t n_train = 1003854; /* floor(1115394 * 0.9) */
    sl_config_t cfg;
    sl_corpus_t c;
    cfg_make(&cfg, data_path("tinyshakespeare/input.txt"), NULL, NULL, SL_LEVEL_CHAR, 0);
    cfg.data.valid_fraction = 0.1;
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_int_eq(sl_vocab_size(c.vocab), 66);
    ck_assert_int_eq(sl_vocab_eos(c.vocab), -1);
    ck_assert_int_eq(sl_vocab_unk(c.vocab), 65); /* never seen: count 0, last */
    ck_assert_int_eq(sl_vocab_count(c.vocab, 65), 0);
    ck_assert_uint_eq(c.train.len, n_train);
    ck_assert_uint_eq(c.valid.len, (size_t)n - n_train);
    ck_assert_str_eq(sl_vocab_word(c.vocab, 0), " "); /* the most frequent character */

    /* the ids spell the text back, newline included */
    FILE *fp = fopen(data_path("tinyshakespeare/input.txt"), "rb");
    ck_assert_ptr_nonnull(fp);
    for (size_t i = 0; i < 2000; i++) {
        char ch = (char)fgetc(fp);
        const char *w = sl_vocab_word(c.vocab, c.train.ids[i]);
        ck_assert_msg(w[0] == ch && w[1] == '\0', "char %zu", i);
    }
    ck_assert_int_eq(fseek(fp, (long)n_train, SEEK_SET), 0);
    for (size_t i = 0; i < 100; i++)
        ck_assert_int_eq(sl_vocab_word(c.vocab, c.valid.ids[i])[0], fgetc(fp));
    fclose(fp);
    sl_corpus_fini(&c);
    sl_config_fini(&cfg);
}
END_TEST

/* Multibyte characters: 2, 3 and 4 byte sequences are one token each. */
START_TEST(test_char_multibyte)
{
    /* h é l l o ' ' 中 文 ' ' 😀 é \n: 12 code points in 21 bytes */
    static const char text[] = "h\xc3\xa9llo \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\xc3\xa9\n";
    const char *path = write_file("utf8.txt", text, sizeof text - 1);
    sl_config_t cfg;
    sl_corpus_t c;
    cfg_make(&cfg, path, NULL, NULL, SL_LEVEL_CHAR, 0);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_uint_eq(c.train.len, 12);
    /* 9 distinct + <unk>; é l ' ' twice, ordered by bytes: ' ' (20) < l (6c) < é (c3) */
    ck_assert_int_eq(sl_vocab_size(c.vocab), 10);
    ck_assert_str_eq(sl_vocab_word(c.vocab, 0), " ");
    ck_assert_str_eq(sl_vocab_word(c.vocab, 1), "l");
    ck_assert_str_eq(sl_vocab_word(c.vocab, 2), "\xc3\xa9");
    ck_assert_int_eq(sl_vocab_count(c.vocab, 2), 2);
    ck_assert_str_eq(sl_vocab_word(c.vocab, c.train.ids[6]), "\xe4\xb8\xad");
    ck_assert_str_eq(sl_vocab_word(c.vocab, c.train.ids[9]), "\xf0\x9f\x98\x80");
    ck_assert_str_eq(sl_vocab_word(c.vocab, c.train.ids[11]), "\n");
    sl_corpus_fini(&c);

    /* the same file at word level: héllo 中文 😀é <eos> */
    cfg.data.level = SL_LEVEL_WORD;
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_uint_eq(c.train.len, 4);
    ck_assert_str_eq(sl_vocab_word(c.vocab, c.train.ids[1]), "\xe4\xb8\xad\xe6\x96\x87");
    ck_assert_int_eq(c.train.ids[3], sl_vocab_eos(c.vocab));
    sl_corpus_fini(&c);
    sl_config_fini(&cfg);
}
END_TEST

/* Loads text as train at the given level and expects code and message (with the path
 * where "%s" is). */
static void
expect_error(const char *text, size_t bytes, sl_level_t level, int vocab_size, sl_status_t code,
             const char *fmt)
{
    const char *path = write_file("bad.txt", text, bytes);
    char want[1024];
    sl_config_t cfg;
    sl_corpus_t c;
    cfg_make(&cfg, path, NULL, NULL, level, vocab_size);
    snprintf(want, sizeof want, fmt, path);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), code);
    ck_assert_str_eq(sl_err_msg(), want);
    ck_assert_ptr_null(c.vocab);
    ck_assert_ptr_null(c.train.ids);
    sl_config_fini(&cfg);
}

START_TEST(test_invalid_utf8)
{
    /* 12345 valid bytes (words and a 2-byte character), then 0xC3 followed by '(' */
    size_t n = 12345;
    char *text = malloc(n + 8);
    for (size_t i = 0; i < n; i++)
        text[i] = (char)(i % 7 == 6 ? ' ' : 'a' + i % 7);
    text[100] = '\xc3';
    text[101] = '\xa9';
    memcpy(text + n, "\xc3(xyz\n", 6);
    for (int level = SL_LEVEL_WORD; level <= SL_LEVEL_CHAR; level++)
        expect_error(text, n + 6, (sl_level_t)level, 0, SL_ERR_FORMAT,
                     "%s: invalid UTF-8 at byte 12345");
    free(text);

    /* truncated sequence at the end, overlong forms, surrogate, beyond U+10FFFF,
     * stray continuation byte, bytes that never occur */
    static const struct {
        const char *text;
        size_t at;
    } cases[] = {
        {"abc \xe4\xb8", 4},   {"ab \xf0\x9f\x98", 3},
        {"x\xc0\xaf", 1},      {"\xc1\xbf", 0},
        {"ab\xe0\x80\xaf", 2}, {"a \xf0\x8f\xbf\xbf", 2},
        {"a\xed\xa0\x80", 1},  {"\xf4\x90\x80\x80", 0},
        {"ok \x80", 3},        {"ok\xf5\x80\x80\x80", 2},
        {"\xff", 0},           {"\xe4\xb8(", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%%s: invalid UTF-8 at byte %zu", cases[i].at);
        expect_error(cases[i].text, strlen(cases[i].text), SL_LEVEL_CHAR, 0, SL_ERR_FORMAT, fmt);
    }

    /* the largest code point and the last ones before the surrogates are fine */
    const char *ok = write_file("ok.txt", "\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80", 10);
    sl_config_t cfg;
    sl_corpus_t c;
    cfg_make(&cfg, ok, NULL, NULL, SL_LEVEL_CHAR, 0);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_uint_eq(c.train.len, 3);
    sl_corpus_fini(&c);

    /* a bad valid file is named as such */
    const char *bad_valid = write_file("bad_valid.txt", "fine\nnot \xc3\n", 11);
    char want[600];
    set_str(&cfg.data.valid, bad_valid);
    snprintf(want, sizeof want, "%s: invalid UTF-8 at byte 9", bad_valid);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_ERR_FORMAT);
    ck_assert_str_eq(sl_err_msg(), want);
    sl_config_fini(&cfg);
}
END_TEST

START_TEST(test_input_errors)
{
    sl_config_t cfg;
    sl_corpus_t c;
    const char *missing = tmp_path("no-such-file.txt");
    char want[600];

    cfg_make(&cfg, missing, NULL, NULL, SL_LEVEL_WORD, 10);
    snprintf(want, sizeof want, "data.train: %s: No such file or directory", missing);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_ERR_IO);
    ck_assert_str_eq(sl_err_msg(), want);
    sl_config_fini(&cfg);

    /* a missing test file, with a good train file */
    char good[512]; /* tmp_path's buffers get reused below */
    snprintf(good, sizeof good, "%s", write_file("good.txt", small_text, sizeof small_text - 1));
    cfg_make(&cfg, good, NULL, missing, SL_LEVEL_WORD, 2);
    snprintf(want, sizeof want, "data.test: %s: No such file or directory", missing);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_ERR_IO);
    ck_assert_str_eq(sl_err_msg(), want);
    sl_config_fini(&cfg);

    expect_error("", 0, SL_LEVEL_WORD, 0, SL_ERR_INVALID, "%s: corpus is empty");
    expect_error("", 0, SL_LEVEL_CHAR, 0, SL_ERR_INVALID, "%s: corpus is empty");
    /* lines, but no word to learn */
    expect_error("\n \n\t\n", 5, SL_LEVEL_WORD, 0, SL_ERR_INVALID,
                 "%s: corpus has no words (its lines are empty)");
    expect_error("<unk> <unk>\n", 12, SL_LEVEL_WORD, 0, SL_ERR_INVALID,
                 "%s: corpus has no words but <unk>");
    /* a vocabulary size that nobody set (its default) is capped at what the corpus
       has; one that a file or --set gave is an error naming the key and its place */
    cfg_make(&cfg, good, NULL, NULL, SL_LEVEL_WORD, 20000);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_int_eq(sl_vocab_size(c.vocab), 9);
    sl_corpus_fini(&c);
    ck_assert_int_eq(sl_config_set(&cfg, "data.vocab_size=20000"), SL_OK);
    snprintf(want, sizeof want,
             "--set data.vocab_size:1:17: data.vocab_size 20000 is larger than the 7 distinct "
             "words of %s (set at most 7, or leave the key out to keep them all)",
             good);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_ERR_INVALID);
    ck_assert_str_eq(sl_err_msg(), want);
    sl_config_fini(&cfg);
    /* exactly as many words as asked for is fine: 7 + <unk> (count 0) + <eos> */
    cfg_make(&cfg, good, NULL, NULL, SL_LEVEL_WORD, 7);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    ck_assert_int_eq(sl_vocab_size(c.vocab), 9);
    ck_assert_int_eq(sl_vocab_count(c.vocab, sl_vocab_unk(c.vocab)), 0);
    sl_corpus_fini(&c);
    sl_config_fini(&cfg);
}
END_TEST

/* A cache directory that cannot be created (its parent is a file): one warning, and
 * the corpus loads all the same, every time. */
START_TEST(test_cache_unwritable)
{
    const char *train = write_file("small.txt", small_text, sizeof small_text - 1);
    write_file("plainfile", "x", 1);
    sl_config_t cfg;
    sl_corpus_t c;
    sl_status_t st;
    cfg_make(&cfg, train, NULL, NULL, SL_LEVEL_WORD, 4);
    set_str(&cfg.data.cache_dir, tmp_path("plainfile/cache"));
    for (int round = 0; round < 2; round++) {
        char *log = load_capturing_log(&c, &cfg, &st);
        ck_assert_int_eq(st, SL_OK);
        ck_assert_int_eq(c.from_cache, 0);
        ck_assert_int_eq(count_substr(log, "warning"), 1);
        ck_assert_msg(count_substr(log, "continuing without a token cache") == 1, "log: %s", log);
        free(log);
        ck_assert_uint_eq(c.train.len, 15);
        ck_assert_int_eq(sl_vocab_size(c.vocab), 6);
        sl_corpus_fini(&c);
    }
    sl_config_fini(&cfg);
}
END_TEST

static Suite *
data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *core = tcase_create("core");
    tcase_add_unchecked_fixture(core, make_tmpdir, remove_tmpdir);
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_word_vocab_by_hand);
    tcase_add_test(core, test_word_valid_fraction_and_max_tokens);
    tcase_add_test(core, test_brown_first_line);
    tcase_add_test(core, test_brown_full_and_cache);
    tcase_add_test(core, test_char_shakespeare);
    tcase_add_test(core, test_char_multibyte);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_add_unchecked_fixture(limits, make_tmpdir, remove_tmpdir);
    tcase_add_test(limits, test_invalid_utf8);
    tcase_add_test(limits, test_input_errors);
    tcase_add_test(limits, test_cache_unwritable);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(data_suite());
}
