// Placeholder: the topics and lag commands are being written in this change set.
export async function runTopics(_argv: string[]): Promise<number> {
  return 2
}
export async function runLag(_argv: string[]): Promise<number> {
  return 2
}
