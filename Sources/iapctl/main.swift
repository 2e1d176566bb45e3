import Foundation

let exitCode = await IAPCtl.main(Array(CommandLine.arguments.dropFirst()))
exit(exitCode)
