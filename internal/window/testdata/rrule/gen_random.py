#!/usr/bin/env python3
"""Random RRULEs with python-dateutil's reading of them, for TestRRuleExamples.

    gen_random.py [seed] > dateutil-random.json

Draws rules lull accepts (daily or coarser, the BY parts the RFC allows
for each FREQ, BYSETPOS, WKST, COUNT or UNTIL or neither) with a DTSTART
in UTC, and lists the first occurrences python-dateutil 2.9 gives from
DTSTART on: dateutil is the reference here, as it was for the independent
check of issue 28.
"""
import json
import random
import sys
from datetime import datetime, timedelta

import dateutil
from dateutil.rrule import rrulestr

DAYS = ['MO', 'TU', 'WE', 'TH', 'FR', 'SA', 'SU']


def some(rng, n, gen):
    out = []
    for _ in range(rng.randint(1, n)):
        x = gen()
        if x not in out:
            out.append(x)
    return out


def signed(rng, n):
    return n if rng.random() < 0.6 else -n


def rule(rng):
    freq = rng.choice(['DAILY', 'WEEKLY', 'MONTHLY', 'MONTHLY', 'YEARLY', 'YEARLY', 'YEARLY'])
    parts = {'FREQ': freq}
    if rng.random() < 0.35:
        parts['INTERVAL'] = str(rng.choice([2, 3, 4, 5, 7, 12, 18]))
    if rng.random() < 0.3:
        parts['WKST'] = rng.choice(DAYS)
    if rng.random() < 0.35:
        parts['BYMONTH'] = some(rng, 4, lambda: rng.randint(1, 12))
    plain = lambda: some(rng, 4, lambda: rng.choice(DAYS))
    within_month = freq == 'MONTHLY' or 'BYMONTH' in parts
    ordinals = lambda: some(rng, 3, lambda: '%d%s' % (signed(rng, rng.randint(1, 5 if within_month else 53)), rng.choice(DAYS)))
    monthdays = lambda: some(rng, 4, lambda: signed(rng, rng.randint(1, 31)))
    if freq == 'DAILY':
        if rng.random() < 0.5:
            parts['BYDAY'] = plain()
        if rng.random() < 0.3:
            parts['BYMONTHDAY'] = monthdays()
    elif freq == 'WEEKLY':
        if rng.random() < 0.75:
            parts['BYDAY'] = plain()
    elif freq == 'MONTHLY':
        k = rng.randint(0, 4)
        if k in (1, 3, 4):
            parts['BYMONTHDAY'] = monthdays()
        if k in (2, 3, 4):
            parts['BYDAY'] = plain() if rng.random() < 0.5 else ordinals()
    else:
        k = rng.randint(0, 6)
        if k == 1:
            parts['BYMONTHDAY'] = monthdays()
        elif k == 2:
            parts['BYWEEKNO'] = some(rng, 3, lambda: signed(rng, rng.choice([1, 2, 20, 26, 51, 52, 53, rng.randint(1, 53)])))
            if rng.random() < 0.5:
                parts['BYDAY'] = plain()
        elif k == 3:
            parts['BYYEARDAY'] = some(rng, 3, lambda: signed(rng, rng.choice([1, 59, 60, 100, 200, 365, 366, rng.randint(1, 366)])))
            if rng.random() < 0.3:
                parts['BYDAY'] = plain()
        elif k == 4:
            parts['BYDAY'] = ordinals()
        elif k >= 5:
            parts['BYMONTHDAY'] = monthdays()
            parts['BYDAY'] = plain() if rng.random() < 0.5 else ordinals()
    if rng.random() < 0.2 and any(k.startswith('BY') for k in parts):
        parts['BYSETPOS'] = some(rng, 2, lambda: signed(rng, rng.choice([1, 2, 3, 4, 8])))
    return parts


def main(seed):
    rng = random.Random(seed)
    out = []
    while len(out) < 400:
        parts = rule(rng)
        dtstart = datetime(rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23), rng.choice([0, 0, 30, rng.randint(0, 59)]))
        bound = rng.random()
        if bound < 0.3:
            parts['COUNT'] = str(rng.choice([1, 2, 3, 5, 10, 20]))
        elif bound < 0.45:
            until = dtstart + timedelta(days=rng.randint(-10, 1500), minutes=rng.choice([0, -1, 1, rng.randint(-1440, 1440)]))
            parts['UNTIL'] = until.strftime('%Y%m%d' if rng.random() < 0.3 else '%Y%m%dT%H%M%S')
        text = ';'.join('%s=%s' % (k, ','.join(map(str, v)) if isinstance(v, list) else v) for k, v in parts.items())
        rr = rrulestr(text, dtstart=dtstart)
        want = []
        for d in rr:
            if d.year > 2200 or len(want) == 12:
                break
            want.append(d.strftime('%Y-%m-%dT%H:%M:%S'))
        bounded = 'COUNT' in parts or 'UNTIL' in parts
        complete = bounded and len(want) < 12 and (not want or rr.after(datetime.strptime(want[-1], '%Y-%m-%dT%H:%M:%S')) is None)
        out.append({'name': 'random %d: %s' % (len(out), text), 'source': 'python-dateutil %s, gen_random.py seed %d' % (dateutil.__version__, seed),
                    'tz': 'UTC', 'dtstart': dtstart.strftime('%Y-%m-%dT%H:%M:%S'), 'rrule': text, 'want': want, 'complete': complete})
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 28)
