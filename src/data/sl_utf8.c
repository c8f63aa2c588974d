/* Strict UTF-8 validation (RFC 3629): the corpus reader rejects anything a decoder
 * would have to guess about, at word and character level alike. */
#include <string.h>

#include "data/sl_data_internal.h"

/* Table 3-7 of the Unicode standard: the lead byte fixes the length and the allowed
 * range of the second byte (which is where overlong forms, surrogates and code
 * points above U+10FFFF show up); later bytes are plain 80..BF. ASCII is checked
 * eight bytes at a time since corpora are mostly ASCII. */
size_t
sl_utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        if (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        unsigned char b = s[i];
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */

        if (b < 0x80) {
            i++;
            continue;
        }
        if (b >= 0xC2 && b <= 0xDF) {
            need = 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 3;
            if (b == 0xE0)
                lo = 0xA0; /* overlong below U+0800 */
            else if (b == 0xED)
                hi = 0x9F; /* surrogates U+D800..DFFF */
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 4;
            if (b == 0xF0)
                lo = 0x90; /* overlong below U+10000 */
            else if (b == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else {
            return i; /* continuation byte, C0/C1 (overlong ASCII), F5..FF */
        }
        if (need > len - i)
            return i;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k < need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
        i += need;
    }
    return len;
}
