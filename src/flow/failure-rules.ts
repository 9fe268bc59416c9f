import { UpstreamError } from '../http/upstream-error.js';
import { type FailureClass, workerFailureClass } from '../protocol/failure-rules.js';
import { findCause } from '../util/cause-chain.js';
import { deadlineIn } from './deadlines.js';

/**
 * The class of `error` (see {@link FailureClass}), with the worker's error when there is one
 * in its causes (it names the worker's URL).
 *
 * @example classifyFailure(UpstreamError.fromStatus(url, 503, 'busy')); // { kind: 'worker-error', upstream }
 */
export function classifyFailure(error: unknown): { kind: FailureClass; upstream: UpstreamError | undefined } {
  const upstream = findCause(error, UpstreamError.is);
  if (deadlineIn(error) !== undefined) return { kind: 'deadline', upstream };
  if (upstream === undefined) return { kind: 'other', upstream };
  return { kind: workerFailureClass(upstream), upstream };
}
