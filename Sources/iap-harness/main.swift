import Foundation

let exitCode = await Harness.main(Array(CommandLine.arguments.dropFirst()))
exit(exitCode)
