'use strict';
// The Range header, answered as nginx's range filter answers it: the Node
// counterpart of services/python-common/lab_http/ranges.py (a port of
// ngx_http_range_parse, where the cases the usual parsers answer otherwise
// are listed).

const MAX_OFFSET_DIGITS = '9223372036854775807'; // nginx's off_t limit for Range values
const NOT_SATISFIABLE = 'not satisfiable';

const isDigit = (c) => c >= '0' && c <= '9';

function parseDigits(value, i) {
  let j = i;
  while (j < value.length && isDigit(value[j])) j++;
  const digits = value.slice(i, j).replace(/^0+/, '');
  const tooBig = digits.length > 19 || (digits.length === 19 && digits > MAX_OFFSET_DIGITS);
  // Values above 2^53 lose precision, which cannot change a comparison with
  // a real file length.
  return [tooBig ? null : Number(digits || '0'), j];
}

function skipSpaces(value, i) {
  while (i < value.length && value[i] === ' ') i++;
  return i;
}

// nginx's range filter only looks at headers starting "bytes=" (any case)
// with something after it.
function isByteRange(value) {
  return value.length >= 7 && value.slice(0, 6).toLowerCase() === 'bytes=';
}

// A port of ngx_http_range_parse for a header starting with "bytes=".
// Returns [[start, endExclusive], ...], NOT_SATISFIABLE (416), or null when
// the header is to be ignored (200), exactly where nginx does.
function parseRange(value, length) {
  const ranges = [];
  const n = value.length;
  let total = 0;
  let i = 6;
  for (;;) {
    i = skipSpaces(value, i);
    let suffix = false;
    let openEnded = false;
    let start = 0;
    let end = 0;
    if (i < n && value[i] === '-') {
      suffix = true;
      i++;
    } else {
      if (i >= n || !isDigit(value[i])) return NOT_SATISFIABLE;
      [start, i] = parseDigits(value, i);
      if (start === null) return NOT_SATISFIABLE;
      i = skipSpaces(value, i);
      if (i >= n || value[i] !== '-') return NOT_SATISFIABLE;
      i = skipSpaces(value, i + 1);
      if (i >= n || value[i] === ',') {
        openEnded = true;
        end = length;
      }
    }
    if (!openEnded) {
      if (i >= n || !isDigit(value[i])) return NOT_SATISFIABLE;
      [end, i] = parseDigits(value, i);
      if (end === null) return NOT_SATISFIABLE;
      i = skipSpaces(value, i);
      if (i < n && value[i] !== ',') return NOT_SATISFIABLE;
      if (suffix) {
        start = end < length ? length - end : 0;
        end = length - 1;
      }
      end = end >= length ? length : end + 1;
    }
    if (start < end) {
      ranges.push([start, end]);
      total += end - start;
    } else if (start === 0) {
      return null;
    }
    if (i >= n || value[i] !== ',') break;
    i++;
  }
  if (ranges.length === 0) return NOT_SATISFIABLE;
  if (total > length) return null;
  return ranges;
}

module.exports = { NOT_SATISFIABLE, isByteRange, parseRange };
