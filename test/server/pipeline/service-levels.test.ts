import { describe, expect, it } from 'vitest';
import { UnsupportedRequestError } from '../../../src/flow/request-shaping.js';
import { errorAnswer } from '../../../src/server/pipeline/error-answers.js';
import { serviceLevelsOf } from '../../../src/server/pipeline/service-levels.js';

const caught = (run: () => unknown): unknown => {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
};

describe('a request names its service levels', () => {
  it('in our headers: x-disagg-slo-ttft-ms and x-disagg-slo-itl-ms, in ms, fractions too', () => {
    expect(serviceLevelsOf({ 'x-disagg-slo-ttft-ms': '2000', 'x-disagg-slo-itl-ms': '12.5' }, undefined)).toEqual({
      ttftMs: 2000,
      itlMs: 12.5,
    });
    expect(serviceLevelsOf({ 'x-disagg-slo-ttft-ms': ' 1e3 ' }, undefined)).toEqual({ ttftMs: 1000 });
  });

  it("in llm-d's headers: x-slo-ttft-ms, and x-slo-tpot-ms as the inter-token level", () => {
    expect(serviceLevelsOf({ 'x-slo-ttft-ms': '500', 'x-slo-tpot-ms': '20' }, undefined)).toEqual({
      ttftMs: 500,
      itlMs: 20,
    });
    expect(serviceLevelsOf({ 'x-slo-tpot-ms': '20' }, undefined)).toEqual({ itlMs: 20 });
  });

  it("ours win over llm-d's where both are given, each level on its own", () => {
    expect(
      serviceLevelsOf(
        { 'x-slo-ttft-ms': '500', 'x-disagg-slo-ttft-ms': '250', 'x-slo-tpot-ms': '20', 'x-disagg-slo-itl-ms': '10' },
        undefined,
      ),
    ).toEqual({ ttftMs: 250, itlMs: 10 });
    expect(serviceLevelsOf({ 'x-slo-ttft-ms': '500', 'x-disagg-slo-itl-ms': '10' }, undefined)).toEqual({
      ttftMs: 500,
      itlMs: 10,
    });
    // llm-d's, overridden, is not read: a gateway's malformed one cannot refuse the request.
    expect(serviceLevelsOf({ 'x-slo-ttft-ms': 'soon', 'x-disagg-slo-ttft-ms': '250' }, undefined)).toEqual({
      ttftMs: 250,
    });
  });

  it("its tenant's defaults stand where its headers name none, and a header overrides its tenant's level", () => {
    expect(serviceLevelsOf({}, { ttftMs: 2000, itlMs: 100 })).toEqual({ ttftMs: 2000, itlMs: 100 });
    expect(serviceLevelsOf({ 'x-slo-ttft-ms': '300' }, { ttftMs: 2000, itlMs: 100 })).toEqual({
      ttftMs: 300,
      itlMs: 100,
    });
    expect(serviceLevelsOf({ 'x-disagg-slo-itl-ms': '40' }, { ttftMs: 2000 })).toEqual({ ttftMs: 2000, itlMs: 40 });
  });

  it('none named and no defaults: no service levels', () => {
    expect(serviceLevelsOf({}, undefined)).toBeUndefined();
    expect(serviceLevelsOf({ 'x-other': '1' }, {})).toBeUndefined();
  });

  it('a value that is not a positive number of ms is a 400 naming the header', () => {
    for (const [name, value] of [
      ['x-disagg-slo-ttft-ms', '0'],
      ['x-disagg-slo-ttft-ms', '-5'],
      ['x-disagg-slo-itl-ms', 'fast'],
      ['x-slo-ttft-ms', ''],
      ['x-slo-tpot-ms', '0x10'],
      ['x-slo-tpot-ms', 'Infinity'],
      ['x-disagg-slo-itl-ms', '1e400'],
      ['x-disagg-slo-itl-ms', '20ms'],
    ] as const) {
      const error = caught(() => serviceLevelsOf({ [name]: value }, { ttftMs: 1, itlMs: 1 }));
      expect(UnsupportedRequestError.is(error), `${name}: ${value}`).toBe(true);
      const answer = errorAnswer(error);
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatchObject({ type: 'invalid_request_error', param: name });
      expect(answer.body.error.message).toBe(
        `${name} must be a positive number of milliseconds, got ${JSON.stringify(value)}`,
      );
    }
  });
});
