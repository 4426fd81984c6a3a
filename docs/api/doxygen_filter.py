#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Doxygen's input filter for include/zkr/: the headers' plain // comments become its /// ones.

The headers are written for a reader of the source, with ordinary comments above each name; this
reads them as Doxygen reads documentation comments, so the reference is made from the same text and
a header needs no markup of its own:
- the comment block at the top of a file documents the file;
- a comment block documents the declaration under it; when several declarations follow it with no
  blank line between (overloads, a pair of accessors, a run of fields), it documents each of them
  (a Doxygen member group, with DISTRIBUTE_GROUP_DOC);
- a comment after a declaration on its line (and its continuation lines below, at the same column)
  documents that declaration, or each of the names it declares (`a = 0, b = 0;  // ...`);
- backslashes and <placeholders> in comments are text, not Doxygen commands or HTML.
Line numbers are kept, so Doxygen's warnings name the header's own lines.
"""
import re
import sys

TRAILING = re.compile(r'^(?P<code>\s*\S.*?[;,{)])(?P<space>\s+)//(?!/)(?P<text>.*)$')
ACCESS = re.compile(r'^\s*(public|private|protected)\s*:')


HTML_TAGS = {'b', 'i', 'em', 'code', 'tt', 'br', 'p', 'pre', 'ul', 'li', 'ol', 'a', 'sub', 'sup'}
PLACEHOLDER = re.compile(r'<(/?)([A-Za-z][\w-]*)>')


def prose(text):
    """Comment text as Doxygen should print it: backslashes and <placeholders> are literal."""
    parts = text.split('`')
    for index in range(0, len(parts), 2):  # outside `code spans`
        part = parts[index].replace('\\', '\\\\')
        parts[index] = PLACEHOLDER.sub(
            lambda m: m.group(0) if m.group(2).lower() in HTML_TAGS else f'\\<{m.group(1)}{m.group(2)}\\>', part)
    return '`'.join(parts)


def is_comment(line):
    return line.lstrip().startswith('//')


def statement_ends(line):
    code = line.split('//')[0].rstrip()
    return code.endswith(';') or code.endswith('}') or code.endswith('};')


def group_after_comment(lines, start):
    """The last line of the run of declarations at lines[start:], if it holds two or more."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    statements = 0
    depth = 0
    end = start
    index = start
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if not stripped or is_comment(line) or ACCESS.match(line) or stripped.startswith('#'):
            break
        line_indent = len(line) - len(line.lstrip())
        if depth == 0 and line_indent < indent:
            break
        code = line.split('//')[0]
        depth += code.count('{') - code.count('}')
        if depth < 0:
            break
        if depth == 0 and statement_ends(line):
            statements += 1
            end = index
        index += 1
    return end if statements >= 2 else None


def filtered(lines):
    out = list(lines)
    prefix = {}  # line index -> the member-group markers that open or close before it
    in_file_comment = True  # the block before the first line of code
    trailing_column = None  # the column of the trailing comment being continued
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if is_comment(line) and not stripped.startswith('///'):
            text = prose(stripped[2:])
            if in_file_comment:
                out[index] = line[:indent] + '///' + text + (' @file' if index == 0 else '')
            elif trailing_column is not None and indent == trailing_column:
                out[index] = line[:indent] + '///<' + text
            else:
                out[index] = line[:indent] + '///' + text
                trailing_column = None
                following = index + 1
                if following < len(lines) and lines[following].strip() and not is_comment(lines[following]):
                    end = group_after_comment(lines, following)
                    if end is not None:
                        out[index] += ' @{'  # the block opens the group it documents
                        prefix[end + 1] = '/*@}*/ ' + prefix.get(end + 1, '')
            index += 1
            continue
        if stripped:
            in_file_comment = False
        trailing_column = None
        match = TRAILING.match(line)
        if match and '"' not in match.group('code'):
            code, space, text = match.group('code', 'space', 'text')
            text = prose(text)
            trailing_column = len(code) + len(space)
            if re.search(r'=[^,;]*,', code) and '(' not in code:
                # `a = 0, b = 0;  // text` documents each of the names it declares
                indent = len(code) - len(code.lstrip())
                out[index] = f'{code[:indent]}/** {text.strip()} @{{ */ {code.lstrip()} /*@}}*/'
                trailing_column = None
            else:
                out[index] = f'{code}{space}///<{text}'
        index += 1
    for index, markers in prefix.items():
        if index >= len(out):
            out.append(markers)
        elif out[index].lstrip().startswith('#'):
            out[index - 1] += ' ' + markers  # a directive must start its line
        else:
            indent = len(out[index]) - len(out[index].lstrip())
            out[index] = out[index][:indent] + markers + out[index][indent:]
    return out


def main():
    with open(sys.argv[1], encoding='utf-8') as source:
        lines = source.read().split('\n')
    sys.stdout.write('\n'.join(filtered(lines)))


if __name__ == '__main__':
    main()
