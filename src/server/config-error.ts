import { branded, DisaggError } from '../util/disagg-error.js';

/**
 * A configuration that cannot be used; the message names the setting as it was given (the
 * option, the flag, the environment variable or the config file's key) and what was expected.
 * `code`: `DISAGG_CONFIG`.
 */
export class ConfigError extends DisaggError {
  static override readonly is = branded<ConfigError>('ConfigError');
  declare readonly code: 'DISAGG_CONFIG';
  /** Each problem found, in the order met: one line each (the message holds them all). */
  readonly problems: readonly string[];

  constructor(message: string, problems: readonly string[] = [message]) {
    super('DISAGG_CONFIG', message);
    this.problems = problems;
  }

  /** One error for every problem of a configuration, so that one restart fixes them all. */
  static of(problems: readonly string[]): ConfigError {
    if (problems.length === 1) return new ConfigError(problems[0] as string);
    return new ConfigError(`${problems.length} problems:\n${problems.map((p) => `  - ${p}`).join('\n')}`, problems);
  }
}
