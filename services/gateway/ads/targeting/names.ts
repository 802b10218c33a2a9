import { Ads } from '../../../common/errors'
import type { Params } from '../conventions'

/**
 * Display names of targeting values. Language names come from the ICU data
 * Node ships (Intl.DisplayNames), which also tells real ISO 639-1 codes
 * from made-up ones and gives the `localized_name` the list and read
 * operations return when asked with `lang`.
 */

const english = new Intl.DisplayNames(['en'], { type: 'language', fallback: 'none' })

/** The English name of an ISO 639-1 code, or undefined when it names no language. */
export function languageName(code: string): string | undefined {
  if (!/^[a-z]{2}$/.test(code)) return undefined
  const name = english.of(code)
  return name === undefined || name === code ? undefined : name
}

const GENDERS: Readonly<Record<string, string>> = { '1': 'Male', '2': 'Female' }

export function genderName(value: string): string {
  return GENDERS[value] ?? value
}

/** `lang` of the reads: an ISO 639-1 code the localization data covers. */
export function readLang(p: Params): string | undefined {
  const lang = p.string('lang', { max: 8 })
  if (lang === undefined) return undefined
  const code = lang.toLowerCase()
  if (!/^[a-z]{2}$/.test(code) || languageName(code) === undefined) {
    throw Ads.invalid('lang', `Invalid lang "${lang.slice(0, 8)}": expected an ISO 639-1 language code such as en or fr`)
  }
  if (Intl.DisplayNames.supportedLocalesOf([code]).length === 0) {
    throw Ads.invalid('lang', `Localized names are not available in "${code}"`)
  }
  return code
}

/** The value's name in `lang`, where one exists (languages). */
export function localizedName(type: string, value: string, lang: string): string | undefined {
  if (type !== 'LANGUAGE') return undefined
  const name = new Intl.DisplayNames([lang], { type: 'language', fallback: 'none' }).of(value)
  return name === undefined || name === value ? undefined : name
}
