import { ClassicError, Problems, type ApiError, type InvalidRequestItem, type ProblemError } from '../../common/errors'

/**
 * A refusal of a chunked upload, said once and rendered in the shape of the
 * interface the client used: a v2 Problem (invalid-request naming the
 * parameter, or resource-not-found for an unknown media id) on /2/, a classic
 * `{"errors":[{code,message}]}` on /1.1/ (38 missing parameter, 44 invalid
 * parameter, 324 invalid media, as the platform's upload host answers).
 */

export type UploadErrorKind = 'missing' | 'invalid' | 'media' | 'not-found'

const CLASSIC_CODE: Record<UploadErrorKind, number> = { missing: 38, invalid: 44, media: 324, 'not-found': 324 }

export class UploadError extends Error {
  constructor(
    readonly kind: UploadErrorKind,
    readonly parameter: string,
    message: string,
    readonly value = ''
  ) {
    super(message)
    this.name = 'UploadError'
  }
}

export const Refuse = {
  missing: (parameter: string) => new UploadError('missing', parameter, `${parameter} parameter is missing.`),
  invalid: (parameter: string, message: string, value = '') => new UploadError('invalid', parameter, message, value.slice(0, 60)),
  media: (parameter: string, message: string, value = '') => new UploadError('media', parameter, message, value.slice(0, 60)),
  unknown: (parameter: string, mediaId: string) =>
    new UploadError('not-found', parameter, `No upload in progress with media id ${mediaId.slice(0, 24)}: it is unknown, another user's, or expired.`, mediaId.slice(0, 24))
}

export function toProblem(err: UploadError): ApiError {
  if (err.kind === 'not-found') return Problems.resourceNotFound(err.parameter, err.value, 'media', err.message)
  return Problems.invalidParameter(err.parameter, err.value, err.message)
}

export function toClassic(err: UploadError): ApiError {
  return new ClassicError(400, { code: CLASSIC_CODE[err.kind], message: err.message })
}

/** A v2 refusal of the one-shot upload (store-media.ts) in the v1.1 shape: the item's message, 324 when it is about the media itself. */
export function classicOfProblem(err: ProblemError): ApiError {
  const item = (err.extras.errors as InvalidRequestItem[] | undefined)?.[0]
  const parameter = Object.keys(item?.parameters ?? {})[0]
  const code = err.statusCode === 413 || parameter === 'media' ? CLASSIC_CODE.media : CLASSIC_CODE.invalid
  return new ClassicError(err.statusCode, { code, message: item?.message ?? err.detail })
}
