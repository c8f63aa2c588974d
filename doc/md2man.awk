# doc/md2man.awk: the man page shoal-config(5) from doc/config.md, at build time, with
# nothing but awk (no pandoc on build machines). It knows the Markdown that config.md
# uses, and only that: headings (# title, ## section, ### subsection), paragraphs,
# ``` code blocks, tables (a row becomes a tagged paragraph: the first cell the tag,
# the middle cells "header: cell", the last the text), numbered and "- " lists, and
# inline `code` (bold), *emphasis* (italic), \| and \* escapes.
# Usage: awk -v version=0.1.0 -f doc/md2man.awk doc/config.md > shoal-config.5

# Text for roff: backslashes doubled into \e; in code also hyphens made minus signs.
function roff(s, code,    out, i, c) {
    out = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\")
            out = out "\\e"
        else if (c == "-" && code)
            out = out "\\-"
        else
            out = out c
    }
    return out
}

# The position of the first c in s at or after from, 0 when none.
function find(s, c, from,    i) {
    for (i = from; i <= length(s); i++)
        if (substr(s, i, 1) == c)
            return i
    return 0
}

# Inline Markdown of one line into roff.
function inline(s,    out, i, c, j, n, word) {
    out = ""
    n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (c == "\\" && i < n && index("|*`_", substr(s, i + 1, 1))) {
            out = out substr(s, i + 1, 1)
            i++
        } else if (c == "`" && (j = find(s, "`", i + 1))) {
            out = out "\\fB" roff(substr(s, i + 1, j - i - 1), 1) "\\fR"
            i = j
        } else if (substr(s, i, 2) == "**" && (j = index(substr(s, i + 2), "**"))) {
            out = out "\\fB" inline(substr(s, i + 2, j - 1)) "\\fR"
            i += j + 2
        } else if (c == "*" && i < n && substr(s, i + 1, 1) != " " &&
                   (j = find(s, "*", i + 1)) && substr(s, j - 1, 1) != " " &&
                   !find(substr(s, i, j - i), "`", 1)) {
            word = substr(s, i + 1, j - i - 1)
            out = out "\\fI" roff(word, 0) "\\fR"
            i = j
        } else {
            out = out roff(c, 0)
        }
    }
    return out
}

# A line of text: a leading . or ' would be a roff request.
function text(s) {
    if (s ~ /^[.']/)
        s = "\\&" s
    return s
}

# The cells of a table row, with \| kept inside them; their count.
function cells(line, out,    n, i, k, cell, c) {
    sub(/^[ \t]*\|/, "", line)
    sub(/\|[ \t]*$/, "", line)
    n = 0
    cell = ""
    for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (c == "\\" && substr(line, i + 1, 1) == "|") {
            cell = cell "\\|"
            i++
        } else if (c == "|") {
            out[++n] = cell
            cell = ""
        } else {
            cell = cell c
        }
    }
    out[++n] = cell
    for (k = 1; k <= n; k++) {
        sub(/^[ \t]+/, "", out[k])
        sub(/[ \t]+$/, "", out[k])
    }
    return n
}

function paragraph() {
    if (need_pp) {
        print ".PP"
        need_pp = 0
    }
}

BEGIN {
    print ".\\\" shoal-config(5), made from doc/config.md by doc/md2man.awk: edit that file."
    print ".TH SHOAL\\-CONFIG 5 \"\" \"shoal " version "\" \"File Formats\""
    print ".SH NAME"
    print "shoal\\-config \\- the run configuration of shoal(1): YAML keys, types, defaults"
    print ".SH SYNOPSIS"
    print ".B shoal train"
    print ".I CONF.yaml"
    print ".RB [ \\-\\-set"
    print ".IR KEY = VALUE ]..."
    print ".br"
    print ".B shoal \\-\\-help\\-config"
    print ".SH DESCRIPTION"
    in_code = 0; in_table = 0; need_pp = 0; title_seen = 0
}

/^```/ {
    if (in_code) {
        print ".fi"
        print ".RE"
        in_code = 0
        need_pp = 1
    } else {
        paragraph()
        print ".RS 4"
        print ".nf"
        in_code = 1
    }
    next
}

in_code {
    print text(roff($0, 0))
    next
}

/^\|/ {
    n = cells($0, row)
    if (!in_table) {            # the header row
        for (k = 1; k <= n; k++)
            head[k] = row[k]
        ncols = n
        in_table = 1
        next
    }
    if (row[1] ~ /^-+$/)        # the separator row
        next
    print ".TP"
    print text(inline(row[1]))
    mid = ""
    for (k = 2; k < n; k++)
        mid = mid (k > 2 ? "; " : "") head[k] ": " inline(row[k])
    if (mid != "") {
        print text(mid)
        print ".br"
    }
    if (n > 1)
        print text(inline(row[n]))
    next
}

in_table { in_table = 0; need_pp = 1 }

/^# / {
    if (title_seen++)
        print ".SH " text(inline(toupper(substr($0, 3))))
    next
}

/^## / {
    print ".SH " text(inline(toupper(substr($0, 4))))
    need_pp = 0
    next
}

/^### / {
    print ".SS " text(inline(substr($0, 5)))
    need_pp = 0
    next
}

/^[0-9]+\. / {
    k = index($0, " ")
    print ".IP " substr($0, 1, k - 1) " 4"
    print text(inline(substr($0, k + 1)))
    need_pp = 0
    next
}

/^- / {
    print ".IP \\(bu 2"
    print text(inline(substr($0, 3)))
    need_pp = 0
    next
}

/^[ \t]*$/ { need_pp = 1; next }

# Text; a list item's continuation lines (no blank line between) stay in the item.
{
    paragraph()
    sub(/^[ \t]+/, "")
    print text(inline($0))
}

END {
    if (in_code) {
        print ".fi"
        print ".RE"
    }
    print ".SH SEE ALSO"
    print ".BR shoal (1),"
    print ".B shoal \\-\\-help\\-config"
    print "(the same keys, from the program itself)."
}
