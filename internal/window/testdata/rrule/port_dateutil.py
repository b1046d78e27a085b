#!/usr/bin/env python3
"""Ports python-dateutil's rrule tests to data for TestRRuleExamples.

    port_dateutil.py path/to/dateutil/tests/test_rrule.py > dateutil.json

Reads every test of the form

    self.assertEqual(list(rrule(FREQ, ..., dtstart=...)), [datetime(...), ...])
    self.assertEqual(list(rrulestr("DTSTART:...\nRRULE:...")), [...])

and writes its rule (as the RRULE text dateutil itself prints), its
DTSTART and the expected datetimes as written in the test: the dates are
the test's own literals, never recomputed. Tests of rule sets (RDATE,
EXDATE, EXRULE, several RRULEs) are skipped; they are not one window.

A rule lull refuses gets "refused": the part its error names (the list in
docs/windows.md, "What an RRULE may say").
"""
import ast
import json
import re
import sys
from datetime import datetime, date

from dateutil import tz
from dateutil.rrule import (rrule, rrulestr, YEARLY, MONTHLY, WEEKLY, DAILY,
                            HOURLY, MINUTELY, SECONDLY, MO, TU, WE, TH, FR, SA, SU)

NS = dict(rrule=rrule, rrulestr=rrulestr, datetime=datetime, date=date, tz=tz,
          YEARLY=YEARLY, MONTHLY=MONTHLY, WEEKLY=WEEKLY, DAILY=DAILY,
          HOURLY=HOURLY, MINUTELY=MINUTELY, SECONDLY=SECONDLY,
          MO=MO, TU=TU, WE=WE, TH=TH, FR=FR, SA=SA, SU=SU)


def refused(rule):
    """The part of an RRULE lull refuses, or None."""
    parts = dict(p.split('=', 1) for p in rule.split(';'))
    freq = parts['FREQ']
    if freq in ('HOURLY', 'MINUTELY', 'SECONDLY'):
        return 'FREQ=' + freq
    for k in parts:
        if k not in ('FREQ', 'INTERVAL', 'COUNT', 'UNTIL', 'BYMONTH', 'BYWEEKNO', 'BYYEARDAY',
                     'BYMONTHDAY', 'BYDAY', 'BYSETPOS', 'WKST'):
            return k
    if 'COUNT' in parts and 'UNTIL' in parts:
        return 'COUNT and UNTIL'
    if 'BYWEEKNO' in parts and freq != 'YEARLY':
        return 'BYWEEKNO'
    if 'BYYEARDAY' in parts and freq != 'YEARLY':
        return 'BYYEARDAY'
    if 'BYMONTHDAY' in parts and freq == 'WEEKLY':
        return 'BYMONTHDAY'
    days = parts.get('BYDAY', '').split(',') if 'BYDAY' in parts else []
    ordinals = [d for d in days if len(d) > 2]
    if ordinals:
        if freq not in ('MONTHLY', 'YEARLY'):
            return 'BYDAY'
        if 'BYWEEKNO' in parts or len(ordinals) != len(days):
            return 'BYDAY'
        if freq == 'MONTHLY' or 'BYMONTH' in parts:
            if any(abs(int(d[:-2])) > 5 for d in ordinals):
                return 'BYDAY'
    if 'BYSETPOS' in parts and not any(k in parts for k in ('BYMONTH', 'BYWEEKNO', 'BYYEARDAY', 'BYMONTHDAY', 'BYDAY')):
        return 'BYSETPOS'
    return None


def rule_of(rr):
    lines = [l for l in str(rr).splitlines() if l.startswith('RRULE:')]
    return lines[0][len('RRULE:'):]


def main(path):
    src = open(path).read()
    tree = ast.parse(src)
    out = []
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef) or cls.name != 'RRuleTest':
            continue
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith('test'):
                continue
            # Leading assignments (NYC = tz.gettz(...)) set up names.
            ns = dict(NS)
            if not all(isinstance(s, ast.Assign) for s in fn.body[:-1]):
                continue
            for s in fn.body[:-1]:
                exec(compile(ast.Module([s], []), path, 'exec'), ns)
            st = fn.body[-1]
            if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
                    and getattr(st.value.func, 'attr', '') == 'assertEqual'):
                continue
            got, want = st.value.args[:2]
            if not (isinstance(got, ast.Call) and getattr(got.func, 'id', '') == 'list' and got.args
                    and isinstance(got.args[0], ast.Call)
                    and getattr(got.args[0].func, 'id', '') in ('rrule', 'rrulestr')):
                continue
            call = got.args[0]
            if call.func.id == 'rrulestr':
                text = eval(compile(ast.Expression(call.args[0]), path, 'eval'), ns)
                lines = [l.strip() for l in text.splitlines() if l.strip()]
                if any(l.upper().startswith(('RDATE', 'EXDATE', 'EXRULE')) for l in lines) or \
                        sum(1 for l in lines if l.upper().startswith('RRULE')) > 1:
                    continue
                if any(kw.arg == 'unfold' for kw in call.keywords):
                    continue
            try:
                rr = eval(compile(ast.Expression(call), path, 'eval'), ns)
            except Exception as e:  # tests of errors
                continue
            expected = eval(compile(ast.Expression(want), path, 'eval'), ns)
            dtstart = rr._dtstart
            tzname = 'UTC'
            if dtstart.tzinfo is not None:
                tzname = re.sub(r'^.*/zoneinfo/', '', getattr(dtstart.tzinfo, '_filename', '') or str(dtstart.tzinfo))
            rule = rule_of(rr)
            case = {
                'name': fn.name,
                'source': 'python-dateutil tests/test_rrule.py:%d %s' % (fn.lineno, fn.name),
                'tz': tzname,
                'dtstart': dtstart.strftime('%Y-%m-%dT%H:%M:%S'),
                'rrule': rule,
            }
            why = refused(rule)
            if dtstart.second:
                why = why or 'startTime'
            if why:
                case['refused'] = why
            else:
                case['want'] = [d.strftime('%Y-%m-%dT%H:%M:%S') for d in expected]
                case['complete'] = True
            out.append(case)
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main(sys.argv[1])
