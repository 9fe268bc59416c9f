// Budgets of a request: one per phase of the flow, the clean-up after a client left, a slow client.
import { DEFAULT_DEADLINES } from '../../flow/deadlines.js';
import { DEFAULT_CLEANUP_BUDGET_MS } from '../../flow/decode-leg.js';
import { nonNegativeMs, positiveMs } from './parsers.js';
import { inGroup, row } from './setting.js';

/** The settings of `--help`'s Deadlines group. */
export const DEADLINE_ROWS = inGroup('Deadlines', [
  ...(
    [
      ['totalMs', 'total', 'the whole request', undefined],
      [
        'prefillFirstOutputMs',
        'prefill-first-output',
        "prefill's first output",
        DEFAULT_DEADLINES.prefillFirstOutputMs,
      ],
      ['handoffMs', 'handoff', 'until prefill has completed and decode has answered', DEFAULT_DEADLINES.handoffMs],
      [
        'decodeFirstTokenMs',
        'decode-first-token',
        "decode's answer, then its first token",
        DEFAULT_DEADLINES.decodeFirstTokenMs,
      ],
      ['idleMs', 'idle', 'between decode items', DEFAULT_DEADLINES.idleMs],
    ] as const
  ).map(([key, name, what, fallback]) =>
    row({
      key: `deadlines.${key}` as const,
      flag: `deadline-${name}-ms`,
      arg: 'N',
      help: `deadline: ${what}; 0 for none`,
      ...(fallback === undefined ? { shownDefault: 'none' } : { default: fallback }),
      parse: nonNegativeMs,
    }),
  ),
  {
    key: 'cleanupBudgetMs',
    flag: 'cleanup-budget-ms',
    arg: 'N',
    help: 'time decode has to take the KV after a client left',
    shownDefault: String(DEFAULT_CLEANUP_BUDGET_MS),
    parse: positiveMs,
  },
  {
    key: 'slowClientTimeoutMs',
    flag: 'slow-client-timeout-ms',
    arg: 'N',
    help: 'how long a client may not read before it is given up',
    default: 30_000,
    parse: positiveMs,
  },
]);
